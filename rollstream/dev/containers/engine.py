"""Start, probe and stop a private Docker daemon whose whole state lives in one directory.

The daemon leaves the machine's networking alone (no iptables rules, no bridge, no forwarding
switched on): containers run with ``--network host`` and reach services on 127.0.0.1. Its data
root, exec root, pid file, API socket and log all live under its directory, so several daemons
(a developer's, each test run's) run side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from rollstream.dev.containers import procfs
from rollstream.dev.containers.api import EngineAPI, EngineAPIError
from rollstream.dev.containers.layout import EngineInfo, EngineLayout, log_tail
from rollstream.dev.containers.settings import DockerSettings
from rollstream.errors import ContainerEngineError
from rollstream.host import require_tool
from rollstream.lifecycle import die_with_parent
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

#: Environment variables that would point the docker client at another engine than ours.
_CLIENT_OVERRIDES = ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
INSTALL_HINT = "Docker's daemon: `apt-get install docker.io` as root (`make test` does it)"
CLIENT_HINT = "the docker client (`apt-get install docker.io`)"

__all__ = ["DockerEngine", "EngineInfo"]


class DockerEngine:
    """One ``dockerd`` on a directory of its own, reachable at :attr:`docker_host`.

    ``start()`` returns when the API answers, or adopts the daemon an earlier start left
    running on the same directory; one that runs but does not answer is stopped and replaced,
    and what a killed one left (pid files, processes, mounts) is cleared first. ``stop()``
    kills the containers, sends SIGTERM and waits. With ``outlive_parent=False`` the daemon gets
    SIGTERM when the thread that started it ends (the test fixture: a killed test run leaves no
    daemon behind); ``async with`` starts it from the event loop's thread for that reason.
    """

    def __init__(
        self,
        settings: DockerSettings | None = None,
        paths: StatePaths | None = None,
        *,
        outlive_parent: bool = True,
    ) -> None:
        self.settings = settings or DockerSettings()
        paths = paths or StatePaths()
        self.dir = (self.settings.dir or paths.state_dir / "docker").resolve()
        self.layout = EngineLayout(self.dir)
        self.outlive_parent = outlive_parent
        self.info: EngineInfo | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock_file: IO[bytes] | None = None
        #: Whether this object launched the daemon (the context managers stop only that one).
        self.launched = False

    # -- where things are ----------------------------------------------------------------

    @property
    def socket(self) -> Path:
        """The daemon's API socket."""
        return self.layout.socket

    @property
    def docker_host(self) -> str:
        """``DOCKER_HOST`` for clients of this daemon: ``unix://DIR/docker.sock``."""
        return self.layout.docker_host

    @property
    def api(self) -> EngineAPI:
        """A client of this daemon's API."""
        return EngineAPI(self.socket)

    def env(self) -> dict[str, str]:
        """The environment of this process, with the docker client pointed at this daemon."""
        env = {k: v for k, v in os.environ.items() if k not in _CLIENT_OVERRIDES}
        return env | {"DOCKER_HOST": self.docker_host}

    def docker(
        self,
        *args: str,
        input: bytes | None = None,
        timeout: float | None = 600.0,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run the docker client on this daemon, ``env`` added; a failure raises with its output."""
        client = require_tool(self.settings.docker, CLIENT_HINT)
        proc = subprocess.run(
            [client, *args],
            input=input,
            capture_output=True,
            env=self.env() | dict(env or {}),
            timeout=timeout,
        )
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout).decode(errors="replace").strip()
            raise ContainerEngineError(f"docker {' '.join(args[:3])} failed: {output[-2000:]}")
        return proc

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> EngineInfo:
        """Start the daemon (or adopt the one already running on this directory)."""
        began = time.monotonic()
        self._lock()
        try:
            pid = self._adopt()
            if pid is None:
                self._launch()
                pid = self._wait_ready()
            return self._ready(pid, began)
        finally:
            self._unlock()

    async def astart(self) -> EngineInfo:
        """:meth:`start` without blocking the event loop (the daemon spawned from its thread)."""
        began = time.monotonic()
        await asyncio.to_thread(self._lock)
        try:
            pid = await asyncio.to_thread(self._adopt)
            if pid is None:
                # Here, not in a worker thread: the parent-death signal fires when the thread
                # that spawned the daemon ends, and the executor's threads come and go.
                self._launch()
                pid = await asyncio.to_thread(self._wait_ready)
            return self._ready(pid, began)
        finally:
            self._unlock()

    def running(self) -> int | None:
        """The pid of the daemon of this directory, if it is alive and is that daemon."""
        return self.layout.daemon_pid()

    def current(self) -> EngineInfo | None:
        """The daemon running and answering on this directory, without starting one."""
        pid = self.running()
        if pid is None or not self.api.ping():
            return None
        return self._ready(pid, time.monotonic())

    def healthy(self) -> bool:
        """Whether the daemon runs and its API answers."""
        return self.running() is not None and self.api.ping()

    def stop(self, *, kill_containers: bool = True) -> bool:
        """Stop the daemon: its containers killed, then SIGTERM, SIGKILL after the timeout.

        Containers are killed first because a session's container holds nothing worth a
        graceful stop, and the daemon would give each one ignoring SIGTERM (a shell as PID 1
        does) ten seconds. Returns whether a running daemon was stopped; what a dead one left
        behind (processes, mounts, pid file) is cleared either way.
        """
        self._lock()
        try:
            return self._stop(kill_containers)
        finally:
            self._unlock()

    def _stop(self, kill_containers: bool) -> bool:
        pid = self.running()
        if pid is None:
            self._reap()
            self.layout.clear_leftovers()
            return False
        if kill_containers:
            self._kill_containers()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_exit(pid, self.settings.stop_timeout):
            log.warning(
                "dockerd %d ignored SIGTERM for %.0fs, killing it", pid, self.settings.stop_timeout
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._wait_exit(pid, 10.0)
        self._reap()
        self.layout.clear_leftovers()
        self.info = None
        log.info("dockerd %d of %s stopped", pid, self.dir)
        return True

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.launched:  # a daemon adopted from an earlier start is left running
            self.stop()

    async def __aenter__(self) -> Self:
        await self.astart()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.launched:
            await asyncio.to_thread(self.stop)

    # -- internals -------------------------------------------------------------------------

    def _lock(self) -> None:
        """Hold this directory's lock: two starts at once would launch two daemons on it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        handle = (self.dir / ".lock").open("ab")
        fcntl.flock(handle, fcntl.LOCK_EX)
        self._lock_file = handle

    def _unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()  # closing releases the lock
            self._lock_file = None

    def _adopt(self) -> int | None:
        """The daemon already running on this directory once it answers; None to launch one."""
        pid = self.running()
        if pid is None:
            self.layout.clear_leftovers()
            return None
        # It may be still starting (another process's start): give it the start timeout.
        deadline = time.monotonic() + self.settings.start_timeout
        while time.monotonic() < deadline and self.running() == pid:
            if self.api.ping():
                log.info("dockerd %d already runs on %s", pid, self.dir)
                return pid
            time.sleep(0.1)
        log.warning("dockerd %d of %s does not answer: stopping it to start anew", pid, self.dir)
        self._stop(kill_containers=False)
        return None

    def _launch(self) -> None:
        """Start dockerd without waiting for it."""
        self._reap()
        dockerd = require_tool(self.settings.dockerd, INSTALL_HINT)
        if os.geteuid() != 0:
            raise ContainerEngineError(
                "dockerd must run as root (namespaces, cgroups, mounts; rootless Docker is not "
                "supported): run the tests, or `rollstream docker start`, as root"
            )
        self.layout.prepare()
        cmd = self.layout.command(dockerd, self.settings.storage_driver)
        with self.layout.log.open("wb") as out:
            # Own session: a Ctrl+C aimed at a foreground command does not reach the daemon.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=None if self.outlive_parent else die_with_parent,
            )
        self.launched = True
        log.info("dockerd starting on %s (pid %d)", self.dir, self._proc.pid)

    def _wait_ready(self) -> int:
        """Wait until the launched daemon's API answers; its pid."""
        assert self._proc is not None, "launch first"
        deadline = time.monotonic() + self.settings.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.layout.clear_leftovers()
                raise ContainerEngineError(
                    f"dockerd exited with code {self._proc.returncode} during start-up"
                    f"\n--- {self.layout.log} ---\n{log_tail(self.layout.log)}"
                )
            if self.api.ping(timeout=1.0):
                return self._proc.pid
            time.sleep(0.05)
        self._proc.kill()
        self._proc.wait()
        self.layout.clear_leftovers()
        raise ContainerEngineError(
            f"dockerd did not answer on {self.socket} within {self.settings.start_timeout:.0f}s"
            f"\n--- {self.layout.log} ---\n{log_tail(self.layout.log)}"
        )

    def _ready(self, pid: int, began: float) -> EngineInfo:
        try:
            version = self.api.version()
        except EngineAPIError as exc:
            raise ContainerEngineError(
                f"dockerd {pid} answered /_ping but not /version: {exc}"
            ) from exc
        self.info = EngineInfo(
            pid=pid,
            docker_host=self.docker_host,
            dir=str(self.dir),
            version=str(version.get("Version", "?")),
            api_version=str(version.get("ApiVersion", "?")),
            startup_seconds=round(time.monotonic() - began, 3),
            reused=self._proc is None or self._proc.pid != pid,
        )
        if not self.info.reused:
            log.info(
                "dockerd %s ready in %.1fs at %s",
                self.info.version,
                self.info.startup_seconds,
                self.docker_host,
            )
        return self.info

    def _kill_containers(self) -> None:
        try:
            running = self.api.running_containers()
            for container in running:
                self.api.kill(container)
        except EngineAPIError as exc:
            log.warning("could not kill the containers before stopping: %s", exc)

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout)
                return True
            return False
        return procfs.wait_gone(pid, "dockerd", str(self.layout.pidfile), timeout)

    def _reap(self) -> None:
        """Collect a daemon of ours that exited, so no zombie holds its pid."""
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None
