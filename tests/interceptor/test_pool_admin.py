"""The pool's admin port against aiohttp servers on 127.0.0.1 standing in for workers' admin ports.

Metrics that never go down while workers miss scrapes and restart, registrations that a slow
worker does not answer in time, the worker URL a registration is told, the shared route table.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rollstream.host import free_port
from rollstream.interceptor.admin import AdminApp, server_url
from rollstream.interceptor.pool import InterceptorPool
from rollstream.interceptor.pool_admin import WORKER_TIMEOUT_S, PoolAdminApp
from rollstream.interceptor.pool_metrics import parse_metrics
from rollstream.interceptor.pool_worker import WorkerProcess
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.settings import KafkaSettings, StatePaths
from tests.interceptor.pool_stack import summed

pytestmark = pytest.mark.integration


@dataclass
class StandIn:
    """A worker's admin port: its counter, whether it answers, how slowly it registers."""

    calls: int = 0
    answering: bool = True
    register_delay_s: float = 0.0
    registered: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        async def metrics(request: web.Request) -> web.Response:
            if not self.answering:
                return web.Response(status=503)
            return web.Response(
                text=f"# TYPE rollstream_calls_total counter\nrollstream_calls_total {self.calls}\n"
                "# TYPE rollstream_calls_in_flight gauge\nrollstream_calls_in_flight 1\n"
            )

        async def register(request: web.Request) -> web.Response:
            # Registered at once, answered late: a busy worker (its loop, its disk).
            session = request.match_info["session"]
            self.registered.append(session)
            await asyncio.sleep(self.register_delay_s)
            return web.json_response({"session": session, "registered": True})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_put("/sessions/{session}", register)
        return app


@dataclass
class Stack:
    pool: InterceptorPool
    workers: list[StandIn]
    url: str  # the pool's admin port


@asynccontextmanager
async def pool_admin(
    tmp_path: Path,
    workers: list[StandIn | None],
    host: str = "127.0.0.1",
    worker_timeout_s: float = WORKER_TIMEOUT_S,
) -> AsyncIterator[Stack]:
    """The pool's admin app in front of ``workers`` (None: a port nobody listens on).

    Each stand-in's port is its worker's admin and proxy port alike (the proxy port is only
    connected to, by the node's reachability check).
    """
    pool = InterceptorPool(
        InterceptorSettings(workers=len(workers), host=host),
        KafkaSettings(bootstrap_servers="127.0.0.1:1"),
        paths=StatePaths(state_dir=tmp_path / "state"),
    )
    servers = [TestServer(w.app(), host="127.0.0.1") for w in workers if w is not None]
    for server in servers:
        await server.start_server()
    ports = iter(server.port or 0 for server in servers)
    pool.workers = [
        WorkerProcess(i, "127.0.0.1", port, port, f"w{i}", up=True)
        for i, port in enumerate(next(ports) if w is not None else free_port() for w in workers)
    ]
    pool.http = aiohttp.ClientSession()
    admin = TestServer(PoolAdminApp(pool, worker_timeout_s).app(), host="127.0.0.1")
    await admin.start_server()
    try:
        yield Stack(pool, [w or StandIn() for w in workers], str(admin.make_url("")).rstrip("/"))
    finally:
        await admin.close()
        await pool.http.close()
        for server in servers:
            await server.close()


async def _scrape(url: str) -> tuple[str, dict[str, float]]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as response:
        text = await response.text()
    values = {
        f"{s.name}{s.labels}": s.value for f in parse_metrics(text).values() for s in f.samples
    }
    return text, values


async def _put(url: str, **headers: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.put(url, headers=headers) as response:
        return response.status, await response.json()


# --- metrics -----------------------------------------------------------------------------------


async def test_pool_counters_never_go_down_while_workers_miss_scrapes_and_restart(
    tmp_path: Path,
) -> None:
    w0, w1 = StandIn(calls=3), StandIn(calls=5)
    async with pool_admin(tmp_path, [w0, w1]) as stack:
        text, values = await _scrape(stack.url)
        assert summed(values, "rollstream_calls_total") == 8
        for family in parse_metrics(text).values():  # one label set per family
            assert len({s.labels == "" for s in family.samples}) == 1, family
        assert "rollstream_calls_total" not in values  # no unlabelled total beside the workers

        w1.answering = False  # down, or too slow for this scrape
        _, values = await _scrape(stack.url)
        assert summed(values, "rollstream_calls_total") == 8  # its last count stands in
        assert values['rollstream_calls_total{worker="1"}'] == 5
        assert 'rollstream_calls_in_flight{worker="1"}' not in values  # no stale gauge
        assert values['rollstream_pool_worker_up{worker="0"}'] == 1
        assert values['rollstream_pool_worker_up{worker="1"}'] == 0
        assert values["rollstream_pool_workers_up"] == 1

        # Restarted by the pool: its new process counts from zero.
        w1.answering, w1.calls = True, 1
        stack.pool.workers[1].restarts = 1
        _, values = await _scrape(stack.url)
        assert values['rollstream_calls_total{worker="1"}'] == 6
        assert summed(values, "rollstream_calls_total") == 9
        w0.calls = 0  # lower with no restart counted: a restart all the same
        _, values = await _scrape(stack.url)
        assert values['rollstream_calls_total{worker="0"}'] == 3
        w0.calls, w1.calls = 2, 4
        _, values = await _scrape(stack.url)
        assert summed(values, "rollstream_calls_total") == 3 + 2 + 5 + 4
        assert values['rollstream_pool_worker_restarts_total{worker="1"}'] == 1


async def test_concurrent_scrapes_count_no_restart_that_did_not_happen(tmp_path: Path) -> None:
    worker = StandIn(calls=1)
    async with pool_admin(tmp_path, [worker, StandIn()]) as stack:

        async def scrape_while_counting() -> None:
            for _ in range(10):
                worker.calls += 1
                await _scrape(stack.url)

        await asyncio.gather(*(scrape_while_counting() for _ in range(4)))
        _, values = await _scrape(stack.url)
        assert values['rollstream_calls_total{worker="0"}'] == worker.calls == 41


# --- registration ------------------------------------------------------------------------------


async def test_a_registration_the_worker_answers_too_late_keeps_its_worker(
    tmp_path: Path,
) -> None:
    slow = StandIn(register_delay_s=1.0)
    async with pool_admin(tmp_path, [slow, StandIn()], worker_timeout_s=0.3) as stack:
        status, body = await _put(f"{stack.url}/sessions/s-slow")
        assert status == 504, body
        assert (body["worker"], body["url"]) == (0, stack.pool.workers[0].url)
        # The worker did register it: the session's connections must still reach it.
        assert slow.registered == ["s-slow"]
        assert stack.pool.affinity.assigned("s-slow") == 0
        assert stack.pool._pick("s-slow")[0] == 0
        assert stack.pool.affinity.loads == [1, 0]
        slow.register_delay_s = 0
        status, body = await _put(f"{stack.url}/sessions/s-slow")  # again: the same worker
        assert (status, body["worker"], body["registered"]) == (200, 0, True)


async def test_a_worker_that_cannot_be_reached_does_not_keep_the_session(tmp_path: Path) -> None:
    async with pool_admin(tmp_path, [None, StandIn()]) as stack:
        status, body = await _put(f"{stack.url}/sessions/s-gone")
        assert status == 503 and "url" not in body
        assert "s-gone" not in stack.pool.affinity


async def test_the_node_waits_for_the_pool_longer_than_the_pool_waits_for_its_worker(
    tmp_path: Path,
) -> None:
    settings = NodeSettings(port=0, base_url="http://127.0.0.1:9")
    assert settings.registration_timeout_s > WORKER_TIMEOUT_S
    # Slower than the node used to wait (2 s), within the pool's wait for its worker (5 s).
    slow = StandIn(register_delay_s=2.5)
    async with pool_admin(tmp_path, [slow, StandIn()]) as stack:
        node = Node(
            settings.model_copy(update={"interceptor_admin": stack.url}),
            KafkaSettings(bootstrap_servers="127.0.0.1:1"),
            paths=StatePaths(state_dir=tmp_path / "node"),
        )
        node._http = aiohttp.ClientSession()
        try:
            assert await node._register("s-1", None) == stack.pool.workers[0].url
        finally:
            await node._http.close()
        assert slow.registered == ["s-1"] and stack.pool.affinity.assigned("s-1") == 0


# --- the worker's URL and the shared routes ----------------------------------------------------


async def test_a_pool_listening_everywhere_names_its_workers_where_it_was_reached(
    tmp_path: Path,
) -> None:
    async with pool_admin(tmp_path, [StandIn(), StandIn()], host="0.0.0.0") as stack:
        worker = stack.pool.workers[0]
        assert worker.url.startswith("http://127.0.0.1:")  # the pool's own view
        _, body = await _put(f"{stack.url}/sessions/s-1", Host="interceptor:8101")
        assert body["url"] == f"http://interceptor:{worker.port}"
        _, body = await _put(f"{stack.url}/sessions/s-2", Host="[fd00::5]:8101")
        assert body["url"] == f"http://[fd00::5]:{stack.pool.workers[1].port}"
    async with pool_admin(tmp_path, [StandIn(), StandIn()]) as stack:
        _, body = await _put(f"{stack.url}/sessions/s-1", Host="interceptor:8101")
        assert body["url"] == stack.pool.workers[0].url  # a pool on one address names it


def test_one_route_table_and_one_url_helper(tmp_path: Path) -> None:
    def routes(app: web.Application) -> set[tuple[str, str]]:
        return {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}

    pool = InterceptorPool(
        InterceptorSettings(workers=2, host="0.0.0.0", port=8100, admin_port=8101),
        KafkaSettings(bootstrap_servers="127.0.0.1:1"),
        paths=StatePaths(state_dir=tmp_path),
    )
    single = AdminApp(cast(Any, None), cast(Any, None)).app()
    assert routes(PoolAdminApp(pool).app()) == routes(single)
    assert ("PUT", "/sessions/{session}") in routes(single)
    assert (pool.url, pool.admin_url) == ("http://127.0.0.1:8100", "http://127.0.0.1:8101")
    assert server_url("10.0.0.5", 1) == "http://10.0.0.5:1"
    assert server_url("::", 2) == "http://127.0.0.1:2"
    assert server_url("::1", 3) == "http://[::1]:3"
