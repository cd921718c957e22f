"""The docker runtime: each session's processes in a container of its own (docker SDK).

The session's ``home/``, ``work/`` and ``logs/`` are bind-mounted at the same paths, so
workspaces, diffs and teardown stay on the host exactly as with ``LocalRuntime``; idle
containers are kept pre-warmed in a pool. The engine is the one ``DOCKER_HOST`` names (the
SDK's ``from_env``); tests run it against a private daemon and against a fake client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollstream.errors import ConfigurationError
from rollstream.sandbox.docker_engine import (
    NOT_RUN,
    ContainerError,
    docker_client,
    engine_failed,
    pump_exec,
    say_not_run,
    socket_path,
    unix_socket_problem,
)
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.harnesses.runner import HarnessResult, harness_env, tail, write_home
from rollstream.sandbox.netns import Wall, listener_in_namespace, setns_problem
from rollstream.sandbox.relay import PortRelay
from rollstream.sandbox.runtime import LocalRuntime, Sandbox
from rollstream.schemas.tasks import CONTAINER_MARK

log = logging.getLogger(__name__)


#: Variables ``harness_env`` inherits from this machine that name host paths: inside a container
#: they would point nowhere (the image's own PATH applies instead), unless the preset sets them.
_HOST_ONLY = ("PATH", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")
#: How long a killed exec's output stream may take to end before the run is given up on.
_KILL_GRACE_S = 10.0
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

    ``mounts`` are host directories bind-mounted read-only at the same paths: the harnesses
    installed on the host, for an image that has Node.js but not the harnesses. ``cpus`` and
    ``memory`` (``"2g"``) bound each container; a scorer's containers also get ``network="none"``.

    With ``walls`` every container gets ``network="none"`` (setup commands included: bake what
    they would download into the image), and a walled run that must reach an address (the
    interceptor) gets a listener at its port inside the container's namespace, made there with
    ``setns`` (root) and relayed from outside (``relay.py``) while the run lasts.

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
        mounts: Sequence[Path] = (),
        cpus: float | None = None,
        memory: str | None = None,
        client: Any = None,
        chosen_by: str = "the runtime setting",
        walls: bool = False,
        walls_chosen_by: str = "the isolation setting",
    ) -> None:
        super().__init__(root, keep)
        if walls and (problem := setns_problem()) is not None:
            raise ConfigurationError(
                f"network isolation of docker sessions is on, but {problem}: run the node as "
                f"root, or set {walls_chosen_by}=none to give containers the {network} network"
            )
        self.walls = walls
        self.image = image
        self.network = "none" if walls else network
        self.prewarm = prewarm
        self.mounts = tuple(Path(m).expanduser().resolve() for m in mounts)
        self.cpus = cpus
        self.memory = memory
        self._owns_client = client is None
        self.client = docker_client(chosen_by) if client is None else client
        self._socket = socket_path(self.client)
        self._idle: list[tuple[Sandbox, Any]] = []
        self._containers: dict[Path, Any] = {}
        self._refill: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self, session_id: str, image: str | None = None) -> Sandbox:
        """A pre-warmed container's sandbox if one is ready, else a new one; refill the pool.

        ``image`` (the task's) replaces the runtime's own: such a container is made for the
        session, since the pool holds containers of the runtime's image only.
        """
        image = image or self.image
        if self._idle and image == self.image:
            sandbox, container = self._idle.pop(0)
            sandbox = dataclasses.replace(sandbox, session_id=session_id)
            log.debug("session %s: pre-warmed container %s", session_id, container.id)
        else:
            sandbox, container = await asyncio.to_thread(
                self._create, session_id, f"rollstream-{session_id}-", image
            )
        self._containers[sandbox.root] = container
        self._fill()
        return sandbox

    async def execute(
        self,
        sandbox: Sandbox,
        launch: HarnessLaunch,
        timeout_s: float,
        logs: Path,
        wall: Wall | None = None,
    ) -> HarnessResult:
        """``launch`` by ``exec`` in the session's container (walled: ``wall.reach`` relayed in).

        The timeout kills the container.
        """
        container = self._containers[sandbox.root]
        if not self.walls or wall is None or wall.reach is None:
            return await self._execute(container, sandbox, launch, timeout_s, logs)
        reach = wall.reach
        listener = await asyncio.to_thread(self._listener, container, reach.port)
        async with PortRelay(listener, reach):
            return await self._execute(container, sandbox, launch, timeout_s, logs)

    def _listener(self, container: Any, port: int) -> Any:
        """A listener at ``port`` on loopback inside ``container``'s network (blocking)."""
        try:
            container.reload()
        except Exception as exc:  # as pump_exec: the SDK's errors when the engine goes away
            raise engine_failed("the harness started", exc) from exc
        return listener_in_namespace(int(container.attrs["State"]["Pid"]), port)

    async def _execute(
        self,
        container: Any,
        sandbox: Sandbox,
        launch: HarnessLaunch,
        timeout_s: float,
        logs: Path,
    ) -> HarnessResult:
        await asyncio.to_thread(_prepare, launch, sandbox.home, logs)
        await asyncio.to_thread(self._reach, "the harness started")
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
        pump = asyncio.ensure_future(asyncio.to_thread(pump_exec, self.client.api, exec_id, logs))
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
            pump.result()  # the engine's failure, if the stream ended with one
            exit_code = await asyncio.to_thread(self._exit_code, exec_id)
            if exit_code in NOT_RUN:
                await asyncio.to_thread(say_not_run, launch.argv, exit_code, logs)
            # As run_harness: what the run left in the background dies with it. kill -1 spares
            # the container's PID 1 (the idle ``sleep``) and the shell sending it.
            await self._quick_exec(container, ["sh", "-c", "kill -KILL -1 2>/dev/null || true"])
        return HarnessResult(
            exit_code=exit_code,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            stdout_tail=tail(logs / "stdout"),
            stderr_tail=tail(logs / "stderr"),
        )

    async def stop(self, sandbox: Sandbox) -> None:
        """Remove the container (forced), then the local runtime's teardown of the directory."""
        container = self._containers.pop(sandbox.root, None)
        if container is not None:
            await self._remove(container)
        await super().stop(sandbox)

    async def close(self) -> None:
        """Stop; remove open sessions' containers, the idle pre-warmed ones, their directories.

        A client the runtime made itself is closed too (one passed in stays its owner's).
        """
        self._closed = True
        # Sessions still open when the runtime closes (a node stopping mid-run) leave no
        # container behind either.
        for container in [self._containers.pop(root) for root in list(self._containers)]:
            await self._remove(container)
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill
        idle, self._idle = self._idle, []
        for sandbox, container in idle:
            await self._remove(container)
            await asyncio.to_thread(shutil.rmtree, sandbox.root, ignore_errors=True)
        if self._owns_client:
            self.client.close()

    async def fill(self) -> None:
        """Start the pool's containers and return once it is full (or a start failed)."""
        self._fill()
        if self._refill is not None:
            await asyncio.shield(self._refill)

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
                made = await asyncio.to_thread(
                    self._create, "prewarmed", "rollstream-docker-", self.image
                )
            except Exception:
                # ``start`` makes its own container then, and reports what goes wrong.
                log.warning("pre-warming a docker container failed", exc_info=True)
                return
            if self._closed:
                await self._remove(made[1])
                await asyncio.to_thread(shutil.rmtree, made[0].root, ignore_errors=True)
                return
            self._idle.append(made)

    def _reach(self, doing: str) -> None:
        """A retriable ContainerError unless the engine's socket takes a connection (blocking).

        Asked before each call to the engine: docker-py's unix connection leaves the socket of a
        failed connect open (a ResourceWarning when collected), so a dead engine is not called.
        An engine dying between this probe and the call still costs that one socket.
        """
        problem = None if self._socket is None else unix_socket_problem(self._socket)
        if problem is not None:
            raise engine_failed(doing, problem)

    def _exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code (blocking); a retriable ContainerError if the engine is gone."""
        self._reach("the harness ran")
        try:
            code: int | None = self.client.api.exec_inspect(exec_id)["ExitCode"]
        except Exception as exc:
            # A stream may also just end when the engine dies; then asking for the code fails.
            raise engine_failed("the harness ran", exc) from exc
        return code

    def _create(self, session_id: str, prefix: str, image: str) -> tuple[Sandbox, Any]:
        """A sandbox directory and a running idle container of ``image`` with it (blocking)."""
        self._reach("making a container")
        self._require_image(image)
        sandbox = self._make_sandbox(session_id, prefix)
        binds = {str(p): {"bind": str(p), "mode": "ro"} for p in self.mounts}
        binds |= {
            str(p): {"bind": str(p), "mode": "rw"}
            for p in (sandbox.home, sandbox.work, sandbox.logs)
        }
        try:
            container = self.client.containers.run(
                image,
                ["sleep", "infinity"],
                detach=True,
                volumes=binds,
                network_mode=self.network,
                user=f"{os.getuid()}:{os.getgid()}",
                working_dir=str(sandbox.work),
                # Marks the container as the runtime's own: a task's setup may change what is
                # outside its workspace here (``schemas/harbor.py``), never on a host.
                environment={"HOME": str(sandbox.home), CONTAINER_MARK: "1"},
                labels={LABEL: "docker", "rollstream.sandbox": str(sandbox.root)},
                **self._limits(),
            )
        except BaseException:
            shutil.rmtree(sandbox.root, ignore_errors=True)
            raise
        return sandbox, container

    def _limits(self) -> dict[str, Any]:
        """The container's CPU and memory bounds, as the SDK names them (none unless set)."""
        limits: dict[str, Any] = {}
        if self.cpus is not None:
            limits["nano_cpus"] = int(self.cpus * 1e9)
        if self.memory is not None:
            # Swap as large as the memory: the bound is the memory, not memory plus swap.
            limits |= {"mem_limit": self.memory, "memswap_limit": self.memory}
        return limits

    def _require_image(self, image: str) -> None:
        """Refuse an image the engine lacks (a ContainerError saying so); nothing is pulled.

        A cluster's images are built or loaded ahead of the run, and a pull from a registry the
        machine cannot reach could hang for minutes.
        """
        errors = importlib.import_module("docker.errors")
        try:
            self.client.images.get(image)
        except errors.ImageNotFound:
            raise ContainerError(
                f"image {image!r} is not in the Docker engine: build or load it there "
                "first (rollstream pulls no image)"
            ) from None

    async def _quick_exec(self, container: Any, argv: list[str]) -> None:
        """Run ``argv`` in ``container`` to its end, best effort (failures only logged)."""
        api = self.client.api
        try:
            await asyncio.to_thread(self._reach, "cleaning up after the harness")
            exec_id = (await asyncio.to_thread(api.exec_create, container.id, argv))["Id"]
            await asyncio.to_thread(api.exec_start, exec_id)
        except Exception as exc:
            log.debug("%s in container %s: %s", argv, container.id, exc)

    async def _kill(self, container: Any) -> None:
        try:
            await asyncio.to_thread(self._reach, "killing a container")
            await asyncio.to_thread(container.kill)
        except Exception as exc:  # already dead or gone: nothing left to kill
            log.debug("killing container %s: %s", container.id, exc)

    async def _remove(self, container: Any) -> None:
        try:
            await asyncio.to_thread(self._reach, "removing a container")
            await asyncio.to_thread(container.remove, force=True)
        except Exception as exc:
            log.warning("removing container %s failed: %s", container.id, exc)


def _prepare(launch: HarnessLaunch, home: Path, logs: Path) -> None:
    write_home(launch, home)
    logs.mkdir(parents=True, exist_ok=True)
