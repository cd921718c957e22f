"""An interceptor worker pool: N mitmproxy processes on one machine behind one address.

One interceptor is one event loop on one core. ``rollstream interceptor --workers N`` runs this
supervisor instead: N ``rollstream interceptor`` processes (the workers), each on its own proxy
and admin port, and in front of them the pool's admin port (``pool_admin``: sessions assigned
to workers, everything else fanned out) and the pool's proxy port (``pool_router``: each
connection relayed to its session's worker, for harnesses that know one address).

Every session lives on one worker, where its state is (delta ledger, sequence numbers,
exact-context memory, strict-mode registration). The node registers a session before launching
its harness and points the harness at the worker's own address, which the registration's reply
names (no hop through the pool), or at the pool's router when it cannot reach the worker there
(remapped ports) or is told to (the node's ``worker_urls``).

A worker that dies is started again on the same ports with the same state name, so it is the
same interceptor: harnesses holding its address reach it again, its registry still accepts its
sessions, its spool drains. The ports and state names are kept in the state directory, so a
restarted pool gets them back too (and rebuilds its assignments from the workers' registries).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from mitmproxy.certs import CertStore
from mitmproxy.options import CONF_BASENAME, KEY_SIZE

from rollstream.errors import ConfigurationError
from rollstream.host import free_port, port_is_free, reachable
from rollstream.http_auth import auth_headers
from rollstream.interceptor.admin import server_url
from rollstream.interceptor.pool_admin import PoolAdminApp
from rollstream.interceptor.pool_affinity import Affinity
from rollstream.interceptor.pool_router import ConnectionRouter
from rollstream.interceptor.pool_worker import (
    WorkerProcess,
    merged_env,
    settings_env,
    worker_base_env,
)
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas.control import PAUSE_PATH
from rollstream.settings import KafkaSettings, StatePaths

log = logging.getLogger(__name__)

_QUICK_DEATH_S = 10.0  # a worker that dies sooner after its start is restarted with back-off
_MAX_BACKOFF_S = 10.0


def registered_sessions(path: Path) -> list[str]:
    """The sessions a worker's registry journal (``registry.SessionRegistry``) holds, read only."""
    sessions: dict[str, None] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            if line.startswith("+"):
                sessions[line[1:].partition("\t")[0]] = None
            elif line.startswith("-"):
                sessions.pop(line[1:], None)
    return list(sessions)


class InterceptorPool:
    """The supervisor of ``settings.workers`` interceptors; see the module docs."""

    def __init__(
        self,
        settings: InterceptorSettings,
        kafka: KafkaSettings,
        publisher: PublisherSettings | None = None,
        paths: StatePaths | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        if settings.workers < 2:
            raise ConfigurationError("a pool has at least two workers; run one interceptor")
        self.settings = settings
        self.kafka = kafka
        self.publisher = publisher or PublisherSettings()
        self.paths = paths or StatePaths()
        self.start_timeout_s = start_timeout_s
        self.confdir = (settings.confdir or self.paths.state_dir / "mitmproxy").expanduser()
        self.affinity = Affinity(settings.workers)
        self.workers: list[WorkerProcess] = []
        self.router: ConnectionRouter | None = None
        self.http: aiohttp.ClientSession | None = None
        self.port = settings.port
        self.admin_port = settings.admin_port
        #: The policy version last set through the pool (given to a worker when it restarts).
        self.policy_version: int | None = None
        self._paused = False
        self._pause_until: float | None = None  # monotonic; None: until resumed
        self._admin: web.AppRunner | None = None
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the workers, wait until each answers, then the router and the admin port."""
        host = self.settings.host
        if self.port == 0:
            self.port = free_port(host)
        name = self.settings.state_name or f"interceptor-{self.port}"
        # mitmproxy makes its CA on start when there is none: N workers would race to write it.
        await asyncio.to_thread(CertStore.from_store, self.confdir, CONF_BASENAME, KEY_SIZE)
        ports = self._ports(self._state_file(name))
        self.workers = [
            WorkerProcess(i, reachable(host), p, a, f"{name}-worker-{i}")
            for i, (p, a) in enumerate(ports)
        ]
        for worker in self.workers:
            journal = self.paths.state_dir / "sessions" / f"{worker.state_name}.txt"
            for session in registered_sessions(journal):
                self.affinity.assign(session, worker.index)
        self._state_file(name).write_text(json.dumps({"workers": ports}))
        # The workers are configured by the pool's settings: they take its admin token.
        self.http = aiohttp.ClientSession(headers=auth_headers(self.settings.admin_token))
        try:
            for worker in self.workers:
                await worker.spawn(self._env(worker))
            await asyncio.gather(
                *(w.wait_healthy(self.http, self.start_timeout_s) for w in self.workers)
            )
            self.router = ConnectionRouter(host, self.port, self._pick)
            await self.router.start()
            self._admin = web.AppRunner(PoolAdminApp(self).app(), access_log=None)
            await self._admin.setup()
            await web.TCPSite(self._admin, host, self.admin_port).start()
            self.admin_port = self._admin.addresses[0][1]
        except BaseException:
            await self.stop()
            raise
        self._watchers = [
            asyncio.create_task(self._watch(w), name=f"interceptor-worker-{w.index}")
            for w in self.workers
        ]
        log.info(
            "interceptor pool: %d workers behind %s (admin %s); %d sessions assigned",
            len(self.workers),
            self.url,
            self.admin_url,
            len(self.affinity),
        )

    async def stop(self) -> None:
        """SIGTERM every worker (each drains and flushes its publisher), then close the rest."""
        self._stopping = True
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        if self.router is not None:
            self.router.stop_accepting()
        grace = self.settings.drain_timeout_s + 20
        codes = await asyncio.gather(*(w.stop(grace) for w in self.workers))
        log.info("interceptor pool stopped; worker exit codes %s", codes)
        if self.router is not None:
            await self.router.stop()
        if self._admin is not None:
            await self._admin.cleanup()
            self._admin = None
        if self.http is not None:
            await self.http.close()
            self.http = None

    async def __aenter__(self) -> InterceptorPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """The pool's proxy address (the router), for harnesses the node did not launch."""
        return server_url(self.settings.host, self.port)

    @property
    def admin_url(self) -> str:
        """The pool's admin port."""
        return server_url(self.settings.host, self.admin_port)

    # -- what the admin port tells us --------------------------------------------------------

    def note_pause(self, lease_s: float | None) -> None:
        """The workers were paused: a worker that restarts is paused too (for what is left)."""
        self._paused = True
        self._pause_until = None if lease_s is None else time.monotonic() + lease_s

    def note_resume(self) -> None:
        """The workers were resumed."""
        self._paused = False
        self._pause_until = None

    def note_policy_version(self, version: int) -> None:
        """The policy version set on the workers: a worker that restarts starts with it."""
        self.policy_version = version

    # -- internals ---------------------------------------------------------------------------

    def _state_file(self, name: str) -> Path:
        path = self.paths.state_dir / "pool" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _ports(self, state: Path) -> list[tuple[int, int]]:
        """Each worker's proxy and admin port: those of the last run where still free."""
        host = self.settings.host
        kept: list[list[int]] = []
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            kept = json.loads(state.read_text())["workers"]
        taken = {self.port, self.admin_port}
        ports: list[tuple[int, int]] = []
        for i in range(self.settings.workers):
            pair = []
            for preferred in kept[i] if i < len(kept) else [0, 0]:
                port = preferred
                if not port or port in taken or not port_is_free(port, host):
                    port = free_port(host, frozenset(taken))
                taken.add(port)
                pair.append(port)
            ports.append((pair[0], pair[1]))
        return ports

    def _env(self, worker: WorkerProcess) -> dict[str, str]:
        """The worker's environment: the pool's settings with its ports and names."""
        settings = self.settings.model_copy(
            update={
                "workers": 1,
                "port": worker.port,
                "admin_port": worker.admin_port,
                "state_name": worker.state_name,
                "confdir": self.confdir,
                "policy_version": self.policy_version
                if self.policy_version is not None
                else self.settings.policy_version,
            }
        )
        publisher = self.publisher
        if publisher.spool_dir is not None:  # one spool per worker, never shared
            publisher = publisher.model_copy(
                update={"spool_dir": publisher.spool_dir / worker.state_name}
            )
        paths = {
            "ROLLSTREAM_STATE_DIR": str(self.paths.state_dir),
            "ROLLSTREAM_CACHE_DIR": str(self.paths.cache_dir),
        }
        return merged_env(
            worker_base_env(),
            settings_env(self.kafka),
            settings_env(publisher),
            settings_env(settings),
            paths,
        )

    def _pick(self, session: str | None) -> tuple[int, str, int]:
        worker = self.workers[self.affinity.worker_of(session)]
        return worker.index, worker.host, worker.port

    async def _watch(self, worker: WorkerProcess) -> None:
        """Restart ``worker`` whenever it dies, on its ports, until the pool stops."""
        backoff = 0.5
        while not self._stopping:
            assert worker.process is not None and self.http is not None
            code = await worker.process.wait()
            if self._stopping:
                return
            worker.up = False
            worker.restarts += 1
            quick = time.monotonic() - worker.started_at < _QUICK_DEATH_S
            log.warning(
                "interceptor worker %d (pid %s) exited with code %s: restarting it on port %d "
                "(restart %d)",
                worker.index,
                worker.pid,
                code,
                worker.port,
                worker.restarts,
            )
            await asyncio.sleep(backoff if quick else 0.1)
            backoff = min(backoff * 2, _MAX_BACKOFF_S) if quick else 0.5
            try:
                await worker.spawn(self._env(worker))
                await worker.wait_healthy(self.http, self.start_timeout_s)
                await self._replay(worker)
            except (ConfigurationError, OSError) as exc:
                log.warning("interceptor worker %d: %s", worker.index, exc)
                if worker.alive():
                    await worker.stop(5)

    async def _replay(self, worker: WorkerProcess) -> None:
        """Bring a restarted worker into the pool's state: paused if the pool is."""
        remaining = None if self._pause_until is None else self._pause_until - time.monotonic()
        if not self._paused or (remaining is not None and remaining <= 0):
            return
        assert self.http is not None
        body = {"drain_timeout_s": 0.1, "lease_s": remaining}
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self.http.post(f"{worker.admin_url}{PAUSE_PATH}", json=body) as reply:
                log.info("interceptor worker %d paused again (%s)", worker.index, reply.status)
