"""Where a session runs: its directories (HOME, workspace, logs) and how processes start in it.

``LocalRuntime`` (the default) gives each session a temporary directory with ``home/``,
``work/`` and ``logs/`` and runs every process (setup commands, the harness) in a process group
of its own through ``rollstream.harnesses.runner``, so a timeout or a cancellation kills
everything the process started. ``DockerRuntime`` runs the same processes in a container per
session (docker SDK), with the same directories bind-mounted at the same paths, so workspaces,
diffs and teardown stay on the host unchanged; idle containers are kept pre-warmed in a pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rollstream.errors import ConfigurationError, RollstreamError
from rollstream.harnesses.presets import HarnessLaunch
from rollstream.harnesses.runner import HarnessResult, harness_env, run_harness, write_home
from rollstream.producers.node.settings import NodeSettings

log = logging.getLogger(__name__)

#: Like a CI step: no profile (on Debian it resets PATH), stop at the first failing command.
_SETUP_SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c")
_ERROR_TAIL = 1000


@dataclass(frozen=True)
class Sandbox:
    """One session's place: a root directory holding ``home/``, ``work/`` and ``logs/``."""

    session_id: str
    root: Path

    @property
    def home(self) -> Path:
        """The session's HOME (harness config and session files go there)."""
        return self.root / "home"

    @property
    def work(self) -> Path:
        """The workspace: the current directory of every process of the session."""
        return self.root / "work"

    @property
    def logs(self) -> Path:
        """Output of the setup commands and the harness, and the workspace diff."""
        return self.root / "logs"


class Runtime(Protocol):
    """Creates sandboxes, runs processes in them, removes them."""

    name: str

    async def start(self, session_id: str) -> Sandbox:
        """A new sandbox for ``session_id``, its directories created."""
        ...

    async def execute(
        self, sandbox: Sandbox, launch: HarnessLaunch, timeout_s: float, logs: Path
    ) -> HarnessResult:
        """Run ``launch`` in ``sandbox.work`` with ``sandbox.home``; output into ``logs``.

        The process and everything it starts are killed when ``timeout_s`` passes (the result
        says ``timed_out``) or when the calling task is cancelled.
        """
        ...

    async def stop(self, sandbox: Sandbox) -> None:
        """Remove the sandbox (unless kept for debugging)."""
        ...

    async def close(self) -> None:
        """Release what the runtime keeps between sessions (pre-warmed containers)."""
        ...


class LocalRuntime:
    """Sessions in temporary directories on this machine, each process in its own group."""

    name = "local"

    def __init__(self, root: Path | None = None, keep: bool = False) -> None:
        self.root = root
        self.keep = keep

    async def start(self, session_id: str) -> Sandbox:
        """A fresh ``rollstream-<session>-*`` directory under ``root`` (default: temp dir)."""
        return self._make_sandbox(session_id, f"rollstream-{session_id}-")

    def _make_sandbox(self, session_id: str, prefix: str) -> Sandbox:
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
        sandbox = Sandbox(session_id, path)
        for folder in (sandbox.home, sandbox.work, sandbox.logs):
            folder.mkdir()
        return sandbox

    async def execute(
        self, sandbox: Sandbox, launch: HarnessLaunch, timeout_s: float, logs: Path
    ) -> HarnessResult:
        """``run_harness``: isolated environment, HOME files, process group, timeout."""
        return await run_harness(launch, sandbox.home, sandbox.work, logs, timeout_s)

    async def stop(self, sandbox: Sandbox) -> None:
        """Delete the session's directory, or log where it was kept."""
        if self.keep:
            log.info("session %s kept in %s", sandbox.session_id, sandbox.root)
            return
        # A large workspace (node_modules, a build) takes a while: not on the event loop.
        await asyncio.to_thread(shutil.rmtree, sandbox.root, ignore_errors=True)

    async def close(self) -> None:
        """Release what the runtime holds between sessions (nothing, here)."""


class SetupError(RollstreamError):
    """A setup command failed or did not finish within the task's init timeout."""


async def run_setup(
    runtime: Runtime,
    sandbox: Sandbox,
    commands: Sequence[str],
    env: Mapping[str, str],
    deadline: float,
) -> None:
    """Run each setup command with bash in the workspace, all before ``deadline`` (loop time).

    Each command's output goes to ``logs/setup-<i>/``; the first failure raises a SetupError
    naming the command, its exit code and the end of its stderr.
    """
    for index, command in enumerate(commands):
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise SetupError(f"init timeout reached before setup command {index + 1}: {command}")
        launch = HarnessLaunch([*_SETUP_SHELL, command], dict(env))
        result = await runtime.execute(sandbox, launch, remaining, sandbox.logs / f"setup-{index}")
        if result.timed_out:
            raise SetupError(
                f"setup command {index + 1} did not finish within the init timeout: {command}"
            )
        if result.exit_code != 0:
            tail = result.stderr_tail.strip()[-_ERROR_TAIL:]
            raise SetupError(
                f"setup command {index + 1} exited with {result.exit_code}: {command}\n{tail}"
            )


def _docker_client() -> Any:
    """A docker SDK client that reached the engine, or a ConfigurationError saying why not."""
    try:
        docker = importlib.import_module("docker")
    except ImportError:
        raise ConfigurationError(
            "the docker runtime needs the docker Python SDK (`pip install docker`); "
            "use ROLLSTREAM_NODE_RUNTIME=local otherwise"
        ) from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise ConfigurationError(
            f"the docker runtime needs a Docker engine, none reachable ({exc}); "
            "use ROLLSTREAM_NODE_RUNTIME=local otherwise"
        ) from exc
    return client


#: Variables ``harness_env`` inherits from this machine that name host paths: inside a container
#: they would point nowhere (the image's own PATH applies instead), unless the preset sets them.
_HOST_ONLY = ("PATH", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")
#: How long a killed exec's output stream may take to end before the run is given up on.
_KILL_GRACE_S = 10.0
_TAIL_BYTES = 4000
#: Label of every container this runtime makes (``docker ps -f label=rollstream.runtime``).
LABEL = "rollstream.runtime"


def container_env(launch: HarnessLaunch, home: Path) -> dict[str, str]:
    """``harness_env`` with paths valid in the container (HOME and TMPDIR are bind-mounted)."""
    env = harness_env(launch, home)
    for name in _HOST_ONLY:
        if name not in launch.env:
            env.pop(name, None)
    return env


class DockerRuntime(LocalRuntime):
    """A container per session from ``image``, sharing the local runtime's directories.

    Construction checks that the docker SDK and an engine are there (a clear ConfigurationError
    otherwise, before any task is taken). Each session's sandbox directory is made on the host as
    by the local runtime and bind-mounted at the same path in a container that only idles
    (``sleep infinity``); setup commands and the harness run in it with ``exec``, while the
    workspace, its diff and teardown stay on the host. The container runs as this process's
    user, so the files it writes stay removable, and in ``network`` mode (``host`` by default,
    so the harness reaches the interceptor on ``127.0.0.1``).

    Up to ``prewarm`` idle containers (each with its empty sandbox) are kept ready and refilled
    in the background, so ``start`` usually costs no container creation. The agent timeout (or a
    cancellation) kills the container: it holds the session's processes and nothing else.
    """

    name = "docker"

    def __init__(
        self,
        image: str,
        root: Path | None = None,
        keep: bool = False,
        *,
        network: str = "host",
        prewarm: int = 0,
        client: Any = None,
    ) -> None:
        super().__init__(root, keep)
        self.image = image
        self.network = network
        self.prewarm = prewarm
        self.client = _docker_client() if client is None else client
        self._idle: list[tuple[Sandbox, Any]] = []
        self._containers: dict[Path, Any] = {}
        self._refill: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self, session_id: str) -> Sandbox:
        """A pre-warmed container's sandbox if one is ready, else a new one; refill the pool."""
        if self._idle:
            sandbox, container = self._idle.pop(0)
            sandbox = dataclasses.replace(sandbox, session_id=session_id)
            log.debug("session %s: pre-warmed container %s", session_id, container.id)
        else:
            sandbox, container = await asyncio.to_thread(
                self._create, session_id, f"rollstream-{session_id}-"
            )
        self._containers[sandbox.root] = container
        self._fill()
        return sandbox

    async def execute(
        self, sandbox: Sandbox, launch: HarnessLaunch, timeout_s: float, logs: Path
    ) -> HarnessResult:
        """``launch`` with ``exec`` in the session's container; the timeout kills the container."""
        container = self._containers[sandbox.root]
        await asyncio.to_thread(_prepare, launch, sandbox.home, logs)
        api = self.client.api
        exec_id = (
            await asyncio.to_thread(
                api.exec_create,
                container.id,
                launch.argv,
                stdout=True,
                stderr=True,
                stdin=False,
                tty=False,
                environment=container_env(launch, sandbox.home),
                workdir=str(sandbox.work),
            )
        )["Id"]
        started = time.monotonic()
        pump = asyncio.ensure_future(asyncio.to_thread(self._pump, exec_id, logs))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(pump), timeout_s)
        except TimeoutError:
            timed_out = True
            await self._kill(container)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump), _KILL_GRACE_S)
        except asyncio.CancelledError:
            await self._kill(container)
            raise
        exit_code = None
        if not timed_out:
            exit_code = (await asyncio.to_thread(api.exec_inspect, exec_id))["ExitCode"]
            # As run_harness: what the run left in the background dies with it. kill -1 spares
            # the container's PID 1 (the idle ``sleep``) and the shell sending it.
            await self._quick_exec(container, ["sh", "-c", "kill -KILL -1 2>/dev/null || true"])
        return HarnessResult(
            exit_code=exit_code,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            stdout_tail=_tail(logs / "stdout"),
            stderr_tail=_tail(logs / "stderr"),
        )

    async def stop(self, sandbox: Sandbox) -> None:
        """Remove the container (forced), then the local runtime's teardown of the directory."""
        container = self._containers.pop(sandbox.root, None)
        if container is not None:
            await self._remove(container)
        await super().stop(sandbox)

    async def close(self) -> None:
        """Stop refilling; remove the idle pre-warmed containers and their directories."""
        self._closed = True
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill
        idle, self._idle = self._idle, []
        for sandbox, container in idle:
            await self._remove(container)
            await asyncio.to_thread(shutil.rmtree, sandbox.root, ignore_errors=True)

    @property
    def idle(self) -> int:
        """Pre-warmed containers ready for ``start``."""
        return len(self._idle)

    def _fill(self) -> None:
        """Start refilling the pool in the background unless it is full or being refilled."""
        if self._closed or len(self._idle) >= self.prewarm:
            return
        if self._refill is None or self._refill.done():
            self._refill = asyncio.create_task(self._refill_pool(), name="docker-prewarm")

    async def _refill_pool(self) -> None:
        while not self._closed and len(self._idle) < self.prewarm:
            try:
                made = await asyncio.to_thread(self._create, "prewarmed", "rollstream-docker-")
            except Exception:
                # ``start`` makes its own container then, and reports what goes wrong.
                log.warning("pre-warming a docker container failed", exc_info=True)
                return
            if self._closed:
                await self._remove(made[1])
                await asyncio.to_thread(shutil.rmtree, made[0].root, ignore_errors=True)
                return
            self._idle.append(made)

    def _create(self, session_id: str, prefix: str) -> tuple[Sandbox, Any]:
        """A sandbox directory and a running idle container with it bind-mounted (blocking)."""
        sandbox = self._make_sandbox(session_id, prefix)
        binds = {
            str(p): {"bind": str(p), "mode": "rw"}
            for p in (sandbox.home, sandbox.work, sandbox.logs)
        }
        try:
            container = self.client.containers.run(
                self.image,
                ["sleep", "infinity"],
                detach=True,
                volumes=binds,
                network_mode=self.network,
                user=f"{os.getuid()}:{os.getgid()}",
                working_dir=str(sandbox.work),
                environment={"HOME": str(sandbox.home)},
                labels={LABEL: "docker", "rollstream.sandbox": str(sandbox.root)},
            )
        except BaseException:
            shutil.rmtree(sandbox.root, ignore_errors=True)
            raise
        return sandbox, container

    def _pump(self, exec_id: str, logs: Path) -> None:
        """Copy the exec's demultiplexed output into ``logs/stdout`` and ``logs/stderr``."""
        stream = self.client.api.exec_start(exec_id, stream=True, demux=True)
        with (logs / "stdout").open("wb") as out, (logs / "stderr").open("wb") as err:
            for chunk_out, chunk_err in stream:
                if chunk_out:
                    out.write(chunk_out)
                    out.flush()
                if chunk_err:
                    err.write(chunk_err)
                    err.flush()

    async def _quick_exec(self, container: Any, argv: list[str]) -> None:
        """Run ``argv`` in ``container`` to its end, best effort (failures only logged)."""
        api = self.client.api
        try:
            exec_id = (await asyncio.to_thread(api.exec_create, container.id, argv))["Id"]
            await asyncio.to_thread(api.exec_start, exec_id)
        except Exception as exc:
            log.debug("%s in container %s: %s", argv, container.id, exc)

    async def _kill(self, container: Any) -> None:
        try:
            await asyncio.to_thread(container.kill)
        except Exception as exc:  # already dead or gone: nothing left to kill
            log.debug("killing container %s: %s", container.id, exc)

    async def _remove(self, container: Any) -> None:
        try:
            await asyncio.to_thread(container.remove, force=True)
        except Exception as exc:
            log.warning("removing container %s failed: %s", container.id, exc)


def _prepare(launch: HarnessLaunch, home: Path, logs: Path) -> None:
    write_home(launch, home)
    logs.mkdir(parents=True, exist_ok=True)


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(path.stat().st_size - _TAIL_BYTES, 0))
        return f.read().decode(errors="replace")


def make_runtime(settings: NodeSettings) -> Runtime:
    """The runtime the settings name (``local`` or ``docker``)."""
    if settings.runtime == "docker":
        return DockerRuntime(
            settings.docker_image,
            settings.work_root,
            settings.keep_workdirs,
            network=settings.docker_network,
            prewarm=settings.prewarm,
        )
    return LocalRuntime(settings.work_root, settings.keep_workdirs)
