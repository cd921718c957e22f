"""The pool's admin port: the routes of one interceptor's, answered for all of its workers.

Sessions go to their worker: PUT assigns a new session to the least-loaded worker that is up
and answers that worker's reply with its ``url`` and index (the node points the session's
harness there), GET and DELETE ask the session's worker. Health, metrics, pause, resume and
the policy version go to every worker at once. A pause, a resume and a policy version are
also remembered by the pool, so a worker that restarts comes back in the pool's state; a pause
that a worker did not answer is not ``drained`` (the caller cannot know it holds calls).

A registration the worker does not answer within ``WORKER_TIMEOUT_S`` is a 504, and the session
stays assigned to that worker: it may have registered the session all the same, and the
session's later connections must then reach it. Whoever registers waits longer than that (the
node's ``registration_timeout_s``), so that the pool's answer, not its caller's patience,
decides the outcome.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from yarl import URL

from rollstream.host import reachable
from rollstream.interceptor.admin import admin_app
from rollstream.interceptor.pool_affinity import Affinity
from rollstream.interceptor.pool_metrics import (
    ScrapeCache,
    by_worker,
    per_worker,
    render,
    single,
)
from rollstream.interceptor.pool_router import ConnectionRouter
from rollstream.interceptor.pool_worker import WorkerProcess
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.schemas.control import METRICS_PATH


class Pool(Protocol):
    """What the admin port reads of the pool (``pool.InterceptorPool``), which owns the port."""

    settings: InterceptorSettings
    http: aiohttp.ClientSession | None
    workers: list[WorkerProcess]
    router: ConnectionRouter | None
    affinity: Affinity

    def note_pause(self, lease_s: float | None) -> None:
        """The workers were paused: a worker that restarts is paused too."""

    def note_resume(self) -> None:
        """The workers were resumed."""

    def note_policy_version(self, version: int) -> None:
        """The policy version set on the workers: a worker that restarts starts with it."""


log = logging.getLogger(__name__)

#: A worker's answer: HTTP status and JSON body, or None when it did not answer.
Reply = tuple[int, dict[str, Any]] | None
#: Seconds the pool waits for a worker's answer (everything but a pause answers at once).
WORKER_TIMEOUT_S = 5.0


class PoolAdminApp:
    """Routes of the pool's admin port."""

    def __init__(self, pool: Pool, worker_timeout_s: float = WORKER_TIMEOUT_S) -> None:
        self.pool = pool
        self.worker_timeout_s = worker_timeout_s
        self.scrapes = ScrapeCache()
        # One scrape of the workers at a time: an older answer observed after a newer one
        # would look like a counter that went down, i.e. a restart, and be counted twice.
        self._scraping = asyncio.Lock()

    def app(self) -> web.Application:
        """The aiohttp application: the routes of ``AdminApp``, behind the pool's tokens."""
        return admin_app(self, self.pool.settings)

    async def _send(
        self,
        worker: WorkerProcess,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """The worker's answer; aiohttp.ClientError, TimeoutError or ValueError if none."""
        http = self.pool.http
        assert http is not None
        headers = {"content-type": "application/json"} if body else None
        async with http.request(
            method,
            f"{worker.admin_url}{path}",
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(
                total=self.worker_timeout_s if timeout is None else timeout
            ),
        ) as response:
            answer = await response.json(content_type=None)
            return response.status, answer if isinstance(answer, dict) else {}

    async def _ask(
        self,
        worker: WorkerProcess,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> Reply:
        try:
            return await self._send(worker, method, path, body, timeout)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def _all(
        self, method: str, path: str, body: bytes | None = None, **kw: Any
    ) -> list[Reply]:
        return list(
            await asyncio.gather(
                *(self._ask(w, method, path, body, **kw) for w in self.pool.workers)
            )
        )

    async def health(self, request: web.Request) -> web.Response:
        """Ok only if every worker answers ok; each worker's answer, and the pool's summary."""
        replies = await self._all("GET", request.rel_url.raw_path)
        workers = []
        for worker, reply in zip(self.pool.workers, replies, strict=True):
            ok = reply is not None and reply[0] == 200 and reply[1].get("status") == "ok"
            workers.append(
                (reply[1] if reply is not None else {})
                | {
                    "worker": worker.index,
                    "status": "ok" if ok else "down",
                    "url": worker.url,
                    "pid": worker.pid,
                    "restarts": worker.restarts,
                }
            )
        answered = [w for w in workers if w["status"] == "ok"]
        healthy = len(answered) == len(workers)
        body = {
            "status": "ok" if healthy else "degraded",
            "workers": workers,
            "broker_connected": bool(answered) and all(w["broker_connected"] for w in answered),
            "spool_bytes": sum(w.get("spool_bytes", 0) for w in answered),
            "spool_alarm": any(w.get("spool_alarm") for w in answered),
            "paused": any(w.get("paused") for w in answered),
        }
        return web.json_response(body, status=200 if healthy else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        """Every worker's metrics labelled by worker (``pool_metrics``), and the pool's own."""
        pool, n = self.pool, len(self.pool.workers)
        async with self._scraping:
            # Read before asking: an answer then comes from the process counted, never from
            # one started later (whose counts the cache would take for its predecessor's).
            restarts = [w.restarts for w in pool.workers]
            texts = await asyncio.gather(*(self._text(w) for w in pool.workers))
            shown = [
                self.scrapes.observe(w.index, text, count)
                for w, text, count in zip(pool.workers, texts, restarts, strict=True)
            ]
        families = by_worker(shown)
        up = [float(t is not None) for t in texts]
        families["rollstream_pool_workers"] = single("rollstream_pool_workers", "gauge", n)
        families["rollstream_pool_workers_up"] = single(
            "rollstream_pool_workers_up", "gauge", sum(up)
        )
        families["rollstream_pool_worker_up"] = per_worker("rollstream_pool_worker_up", "gauge", up)
        families["rollstream_pool_worker_restarts_total"] = per_worker(
            "rollstream_pool_worker_restarts_total",
            "counter",
            [float(w.restarts) for w in pool.workers],
        )
        routed = pool.router.routed if pool.router is not None else {}
        families["rollstream_pool_connections_routed_total"] = per_worker(
            "rollstream_pool_connections_routed_total",
            "counter",
            [float(routed.get(i, 0)) for i in range(n)],
        )
        families["rollstream_pool_sessions_assigned"] = per_worker(
            "rollstream_pool_sessions_assigned", "gauge", [float(x) for x in pool.affinity.loads]
        )
        return web.Response(text=render(families), content_type="text/plain")

    async def _text(self, worker: WorkerProcess) -> str | None:
        http = self.pool.http
        assert http is not None
        try:
            async with http.get(
                f"{worker.admin_url}{METRICS_PATH}",
                timeout=aiohttp.ClientTimeout(total=self.worker_timeout_s),
            ) as response:
                return await response.text() if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def session(self, request: web.Request) -> web.Response:
        """The session's calls, as its worker counts them."""
        session = request.match_info["session"]
        worker = self.pool.workers[self.pool.affinity.worker_of(session)]
        return _answer(worker, await self._ask(worker, "GET", request.rel_url.raw_path))

    async def register(self, request: web.Request) -> web.Response:
        """Register the session on its worker (a new one: the least loaded that is up).

        A worker that does not answer in time keeps the session (a 504 naming it); one that
        cannot be reached or refuses it does not (a new session's assignment is dropped).
        """
        session = request.match_info["session"]
        affinity = self.pool.affinity
        new = session not in affinity
        index = affinity.choose(session, [w.index for w in self.pool.workers if w.up])
        # Counted at once, so that registrations arriving together spread over the workers.
        affinity.assign(session, index)
        worker = self.pool.workers[index]
        url = self._worker_url(worker, request)
        reply: Reply = None
        try:
            reply = await self._send(worker, "PUT", request.rel_url.raw_path, await request.read())
        except aiohttp.ConnectionTimeoutError:
            pass  # never connected: the worker did not see the request
        except TimeoutError:
            # Sent and unanswered: the worker may have registered it (a slow disk, a busy
            # loop). Dropping the assignment would send the session's later connections to
            # another worker, which does not know it.
            log.warning(
                "session %s: interceptor worker %d did not answer its registration within %g s;"
                " the session stays assigned to it",
                session,
                worker.index,
                self.worker_timeout_s,
            )
            error = (
                f"interceptor worker {worker.index} did not answer within "
                f"{self.worker_timeout_s:g} s; the session stays assigned to it"
            )
            return web.json_response(
                {"error": error, "session": session, "worker": worker.index, "url": url},
                status=504,
            )
        except (aiohttp.ClientError, ValueError):
            pass
        if new and (reply is None or not reply[1].get("registered")):
            affinity.forget(session)
        return _answer(worker, reply, url=url)

    def _worker_url(self, worker: WorkerProcess, request: web.Request) -> str:
        """The worker's proxy URL told to whoever registers: the pool's view of it, mostly.

        A pool listening on a wildcard has its workers listen on every address of this
        machine; the pool's own view (loopback) names none another container or machine can
        use, while the address the caller reached the admin port by is one of them.
        """
        host = self.pool.settings.host
        if reachable(host) != host and request.url.host:  # a wildcard: reachable() replaced it
            return str(URL.build(scheme="http", host=request.url.host, port=worker.port))
        return worker.url

    async def forget(self, request: web.Request) -> web.Response:
        """Forget the session on its worker, and its assignment."""
        session = request.match_info["session"]
        worker = self.pool.workers[self.pool.affinity.worker_of(session)]
        reply = await self._ask(worker, "DELETE", request.rel_url.raw_path)
        if reply is not None and reply[0] < 400:
            self.pool.affinity.forget(session)
        return _answer(worker, reply)

    async def pause(self, request: web.Request) -> web.Response:
        """Pause every worker at once; drained only when every worker answered drained."""
        raw = await request.read()
        body = _loads(raw)
        drain = body.get("drain_timeout_s")
        wait = drain if isinstance(drain, int | float) and drain > 0 else 60.0
        wait += self.worker_timeout_s
        replies = await self._all("POST", request.rel_url.raw_path, raw, timeout=wait)
        refused = _refused(replies)
        if refused is not None:
            return refused
        answered = [r[1] for r in replies if r is not None]
        if not answered:
            return _error("no interceptor worker answered", 503)
        lease = body.get("lease_s")
        self.pool.note_pause(float(lease) if isinstance(lease, int | float) else None)
        unreachable = [i for i, r in enumerate(replies) if r is None]
        return web.json_response(
            {
                "paused": True,
                "in_flight": sum(int(r.get("in_flight", 0)) for r in answered),
                "drained": not unreachable and all(r.get("drained") for r in answered),
                "lease_s": answered[0].get("lease_s"),
                "workers": _indexed(replies),
                "unreachable": unreachable,
            }
        )

    async def resume(self, request: web.Request) -> web.Response:
        """Resume every worker (one that is down comes back resumed)."""
        self.pool.note_resume()
        replies = await self._all("POST", request.rel_url.raw_path)
        unreachable = [i for i, r in enumerate(replies) if r is None]
        return web.json_response({"paused": False, "unreachable": unreachable})

    async def policy_version(self, request: web.Request) -> web.Response:
        """Set the policy version on every worker (one that is down comes back with it)."""
        raw = await request.read()
        replies = await self._all("POST", request.rel_url.raw_path, raw)
        refused = _refused(replies)
        if refused is not None:
            return refused
        version = _loads(raw).get("version")
        if isinstance(version, int):
            self.pool.note_policy_version(version)
        unreachable = [i for i, r in enumerate(replies) if r is None]
        return web.json_response({"policy_version": version, "unreachable": unreachable})


def _answer(worker: WorkerProcess, reply: Reply, url: str | None = None) -> web.Response:
    """The worker's reply, naming the worker (and its proxy ``url``); a 503 if it is down."""
    if reply is None:
        return _error(f"interceptor worker {worker.index} did not answer", 503)
    status, body = reply
    body = body | {"worker": worker.index}
    if url is not None:
        body["url"] = url
    return web.json_response(body, status=status)


def _refused(replies: list[Reply]) -> web.Response | None:
    """The first client error a worker answered (every worker reads the same body)."""
    for reply in replies:
        if reply is not None and 400 <= reply[0] < 500:
            return web.json_response(reply[1], status=reply[0])
    return None


def _indexed(replies: list[Reply]) -> list[dict[str, Any]]:
    return [
        {"worker": i, "status": "ok" if r is not None else "down"} | (r[1] if r else {})
        for i, r in enumerate(replies)
    ]


def _loads(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": message}, status=status)
