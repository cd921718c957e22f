"""The pool's admin port: the routes of one interceptor's, answered for all of its workers.

Sessions go to their worker: PUT assigns a new session to the least-loaded worker that is up
and answers that worker's reply with its ``url`` and index (the node points the session's
harness there), GET and DELETE ask the session's worker. Health, metrics, pause, resume and
the policy version go to every worker at once. A pause, a resume and a policy version are
also remembered by the pool, so a worker that restarts comes back in the pool's state; a pause
that a worker did not answer is not ``drained`` (the caller cannot know it holds calls).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from rollstream.capture.interceptor.pool_metrics import merge_metrics, per_worker, render

if TYPE_CHECKING:
    from rollstream.capture.interceptor.pool import InterceptorPool
    from rollstream.capture.interceptor.pool_worker import WorkerProcess

#: A worker's answer: HTTP status and JSON body, or None when it did not answer.
Reply = tuple[int, dict[str, Any]] | None
_QUICK = 5.0  # seconds: everything but a pause answers at once


class PoolAdminApp:
    """Routes of the pool's admin port."""

    def __init__(self, pool: InterceptorPool) -> None:
        self.pool = pool

    def app(self) -> web.Application:
        """The aiohttp application (the same routes as ``AdminApp``)."""
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/sessions/{session}", self.session)
        app.router.add_put("/sessions/{session}", self.register)
        app.router.add_delete("/sessions/{session}", self.forget)
        app.router.add_post("/admin/pause", self.pause)
        app.router.add_post("/admin/resume", self.resume)
        app.router.add_post("/admin/policy-version", self.policy_version)
        return app

    async def _ask(
        self,
        worker: WorkerProcess,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: float = _QUICK,
    ) -> Reply:
        http = self.pool.http
        assert http is not None
        headers = {"content-type": "application/json"} if body else None
        try:
            async with http.request(
                method,
                f"{worker.admin_url}{path}",
                data=body or None,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                answer = await response.json(content_type=None)
                return response.status, answer if isinstance(answer, dict) else {}
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
        replies = await self._all("GET", "/health")
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
        """The workers' metrics summed and per worker, and the pool's own."""
        texts = await asyncio.gather(*(self._text(w) for w in self.pool.workers))
        families = merge_metrics(list(texts))
        pool, n = self.pool, len(self.pool.workers)
        families["rollstream_pool_workers"] = per_worker(
            "rollstream_pool_workers", "gauge", [], total=n
        )
        families["rollstream_pool_workers_up"] = per_worker(
            "rollstream_pool_workers_up", "gauge", [float(t is not None) for t in texts]
        )
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
                f"{worker.admin_url}/metrics", timeout=aiohttp.ClientTimeout(total=_QUICK)
            ) as response:
                return await response.text() if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def session(self, request: web.Request) -> web.Response:
        """The session's calls, as its worker counts them."""
        session = request.match_info["session"]
        worker = self.pool.workers[self.pool.affinity.worker_of(session)]
        return _answer(worker, await self._ask(worker, "GET", f"/sessions/{session}"))

    async def register(self, request: web.Request) -> web.Response:
        """Register the session on its worker (a new one: the least loaded that is up)."""
        session = request.match_info["session"]
        affinity = self.pool.affinity
        new = session not in affinity
        index = affinity.choose(session, [w.index for w in self.pool.workers if w.up])
        # Counted at once, so that registrations arriving together spread over the workers.
        affinity.assign(session, index)
        worker = self.pool.workers[index]
        reply = await self._ask(worker, "PUT", f"/sessions/{session}", await request.read())
        if new and (reply is None or not reply[1].get("registered")):
            affinity.forget(session)
        return _answer(worker, reply, url=True)

    async def forget(self, request: web.Request) -> web.Response:
        """Forget the session on its worker, and its assignment."""
        session = request.match_info["session"]
        worker = self.pool.workers[self.pool.affinity.worker_of(session)]
        reply = await self._ask(worker, "DELETE", f"/sessions/{session}")
        if reply is not None and reply[0] < 400:
            self.pool.affinity.forget(session)
        return _answer(worker, reply)

    async def pause(self, request: web.Request) -> web.Response:
        """Pause every worker at once; drained only when every worker answered drained."""
        raw = await request.read()
        body = _loads(raw)
        drain = body.get("drain_timeout_s")
        wait = (drain if isinstance(drain, int | float) and drain > 0 else 60.0) + _QUICK
        replies = await self._all("POST", "/admin/pause", raw, timeout=wait)
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
        replies = await self._all("POST", "/admin/resume")
        unreachable = [i for i, r in enumerate(replies) if r is None]
        return web.json_response({"paused": False, "unreachable": unreachable})

    async def policy_version(self, request: web.Request) -> web.Response:
        """Set the policy version on every worker (one that is down comes back with it)."""
        raw = await request.read()
        replies = await self._all("POST", "/admin/policy-version", raw)
        refused = _refused(replies)
        if refused is not None:
            return refused
        version = _loads(raw).get("version")
        if isinstance(version, int):
            self.pool.note_policy_version(version)
        unreachable = [i for i, r in enumerate(replies) if r is None]
        return web.json_response({"policy_version": version, "unreachable": unreachable})


def _answer(worker: WorkerProcess, reply: Reply, url: bool = False) -> web.Response:
    """The worker's reply, naming the worker (and its proxy ``url``); a 503 if it is down."""
    if reply is None:
        return _error(f"interceptor worker {worker.index} did not answer", 503)
    status, body = reply
    body = body | {"worker": worker.index}
    if url:
        body["url"] = worker.url
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
