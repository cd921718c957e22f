"""The project's image (compose/Dockerfile, target ``rollstream``), built once per content, saved.

Every test run starts an engine of its own, which holds no image: building the project image
there downloaded every dependency inside the build, minutes of a test's time on each run. The
set-up makes it instead, with an engine of its own, and saves it under the cache:

- the dependencies image: the Debian base with ``/opt/rollstream/venv`` holding what
  ``rollstream[all]`` needs, made once per dependency list (``docker run`` with a pip cache
  of its own mounted, then ``docker commit``) and saved;
- the project image: compose/Dockerfile built on the dependencies image (its ``PYTHON_IMAGE``),
  so the Dockerfile's ``pip install`` finds every dependency there and installs the project
  alone; named after the build context's content, saved.

A test's engine loads the saved project image (:func:`load_project_image`, seconds). What the
live Compose test therefore does not cover: resolving the dependencies from PyPI inside a
Dockerfile build (done once, the same way, in the dependencies image).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from rollstream.dev.containers import build_context
from rollstream.dev.containers.engine import DockerEngine
from rollstream.dev.containers.images import base_image, base_tag
from rollstream.dev.containers.settings import DockerSettings
from rollstream.errors import ContainerEngineError
from rollstream.host import exclusive
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

PROJECT_REPOSITORY = "rollstream"
DEPS_REPOSITORY = "rollstream-deps"
#: Bump when the dependencies image's recipe changes what it holds.
DEPS_RECIPE = "1"
#: Saved project images kept in the cache (one per checkout content; older ones are removed).
KEEP_SAVED = 2
#: How the saved copies' file names start (distinct: removing old ones of one spares the other).
PROJECT_SAVED = "rollstream-image-"
DEPS_SAVED = "rollstream-deps-"
_VENV = "/opt/rollstream/venv"


@dataclass(frozen=True)
class ProjectImage:
    """The names of the project image for this checkout and base, and where they are saved."""

    base: str
    deps_tag: str
    tag: str
    deps_saved: Path
    saved: Path

    @property
    def deps_reference(self) -> str:
        """``rollstream-deps:KEY``."""
        return f"{DEPS_REPOSITORY}:{self.deps_tag}"

    @property
    def reference(self) -> str:
        """``rollstream:KEY``."""
        return f"{PROJECT_REPOSITORY}:{self.tag}"


def project_image(
    settings: DockerSettings | None = None, paths: StatePaths | None = None
) -> ProjectImage:
    """What the project image of this checkout is called, and where its saved copies go."""
    build_context.require_checkout()
    settings = settings or DockerSettings()
    paths = paths or StatePaths()
    base = base_tag(settings)
    deps = _deps_key(base, build_context.requirements())
    tag = build_context.content_key(base, build_context.context_files())
    images = paths.cache_dir / "images"
    return ProjectImage(
        base,
        deps,
        tag,
        images / f"{DEPS_SAVED}{deps}.tar",
        images / f"{PROJECT_SAVED}{tag}.tar",
    )


def _deps_key(base: str, requirements: list[str]) -> str:
    text = "\n".join([DEPS_RECIPE, base, *requirements])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def is_saved(paths: StatePaths | None = None) -> bool:
    """Whether this checkout's project image is saved in the cache."""
    return project_image(paths=paths).saved.is_file()


def build_saved(
    settings: DockerSettings | None = None, paths: StatePaths | None = None
) -> ProjectImage:
    """Build this checkout's project image with an engine of its own and save it; or find it.

    One build at a time (a lock in the cache; a second caller waits and then finds it saved).
    """
    settings = settings or DockerSettings()
    paths = paths or StatePaths()
    names = project_image(settings, paths)
    names.saved.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(names.saved.parent / "rollstream-image.lock"):
        if names.saved.is_file():
            return names
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rollstream-image-") as scratch:
            engine = DockerEngine(
                settings.model_copy(update={"dir": Path(scratch) / "engine"}),
                StatePaths(state_dir=Path(scratch), cache_dir=paths.cache_dir),
                outlive_parent=False,
            )
            with engine:
                base_image(engine, settings, paths)
                _ensure_deps(engine, names, paths)
                _build(engine, names, Path(scratch) / "context")
                _save(engine, names.reference, names.saved)
        _prune(names.saved.parent, PROJECT_SAVED, KEEP_SAVED)
        log.info(
            "saved %s in %.0fs (%.0f MB): %s",
            names.reference,
            time.monotonic() - began,
            names.saved.stat().st_size / 1e6,
            names.saved,
        )
    return names


def load_project_image(engine: DockerEngine, paths: StatePaths | None = None) -> ProjectImage:
    """The project image of this checkout in ``engine``: there already, or loaded from the cache.

    Never builds: a missing saved image is an error naming the set-up step that makes it.
    """
    names = project_image(engine.settings, paths)
    if engine.api.image(names.reference) is not None:
        return names
    if not names.saved.is_file():
        raise ContainerEngineError(
            f"{names.reference} is not saved in {names.saved.parent}: the set-up builds it "
            "(`python -m rollstream.dev.prebuilt build project-image`)"
        )
    began = time.monotonic()
    engine.docker("load", "--quiet", "--input", str(names.saved), timeout=600)
    log.info("loaded %s in %.1fs", names.reference, time.monotonic() - began)
    return names


def _ensure_deps(engine: DockerEngine, names: ProjectImage, paths: StatePaths) -> None:
    """The dependencies image in ``engine``: loaded if saved, else made and saved."""
    if engine.api.image(names.deps_reference) is not None:
        return
    if names.deps_saved.is_file():
        engine.docker("load", "--quiet", "--input", str(names.deps_saved), timeout=600)
        return
    began = time.monotonic()
    requirements = names.deps_saved.with_suffix(".requirements.txt")
    requirements.write_text("\n".join(build_context.requirements()) + "\n")
    pip_cache = paths.cache_dir / "images" / "pip"
    pip_cache.mkdir(parents=True, exist_ok=True)
    container = f"rollstream-deps-{uuid.uuid4().hex[:8]}"
    script = (
        f"python3 -m venv {_VENV} && {_VENV}/bin/pip install --quiet --upgrade pip"
        f" && {_VENV}/bin/pip install --quiet -r /tmp/requirements.txt"
    )
    try:
        engine.docker(
            *("run", "--name", container, "--network", "host"),
            *("--env", "PIP_CACHE_DIR=/tmp/pip-cache", "--env", "PIP_DISABLE_PIP_VERSION_CHECK=1"),
            *("--volume", f"{pip_cache}:/tmp/pip-cache"),
            *("--volume", f"{requirements}:/tmp/requirements.txt:ro"),
            *(names.base, "/bin/sh", "-c", script),
            timeout=1800,
        )
        engine.docker(*("commit", "--change", 'CMD ["/bin/bash"]', container, names.deps_reference))
    finally:
        with contextlib.suppress(ContainerEngineError):
            engine.docker("rm", "--force", container)
    _save(engine, names.deps_reference, names.deps_saved)
    _prune(names.deps_saved.parent, DEPS_SAVED, 1)
    log.info("dependencies image %s made in %.0fs", names.deps_reference, time.monotonic() - began)


def _build(engine: DockerEngine, names: ProjectImage, context: Path) -> None:
    """compose/Dockerfile (target rollstream) on the dependencies image, classic builder."""
    repo = build_context.require_checkout()
    for relative in build_context.context_files():
        (context / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / relative, context / relative)
    shutil.copy2(build_context.DOCKERFILE, context / "Dockerfile")
    engine.docker(
        *("build", "--network", "host", "--target", "rollstream"),
        *("--build-arg", f"PYTHON_IMAGE={names.deps_reference}"),
        *("--tag", names.reference, str(context)),
        timeout=1200,
        env={"DOCKER_BUILDKIT": "0"},  # no BuildKit frontend image can be pulled here
    )


def _save(engine: DockerEngine, reference: str, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    engine.docker("save", "--output", str(partial), reference, timeout=600)
    partial.replace(target)  # whole or not at all


def _prune(folder: Path, prefix: str, keep: int) -> None:
    """Remove all but the ``keep`` newest saved images whose names start with ``prefix``."""
    found = sorted(folder.glob(f"{prefix}*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in found[keep:]:
        old.unlink(missing_ok=True)
        old.with_suffix(".requirements.txt").unlink(missing_ok=True)
