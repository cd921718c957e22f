"""The pool's connection router against real HTTP servers on 127.0.0.1 standing in for workers."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rollstream.host import free_port
from rollstream.interceptor.pool_affinity import Affinity, hashed_worker
from rollstream.interceptor.pool_router import ConnectionRouter

pytestmark = pytest.mark.integration


def _worker_app(index: int) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {
                "worker": index,
                "path": request.path_qs,
                "auth": request.headers.get("authorization"),
                "sha": hashlib.sha256(body).hexdigest(),
            }
        )

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for i in range(5):
            await response.write(f"data: {index}-{i}\n\n".encode())
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/stream", stream)
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


@dataclass
class Routed:
    router: ConnectionRouter
    affinity: Affinity
    url: str


@pytest.fixture
async def routed() -> AsyncIterator[Routed]:
    servers = [TestServer(_worker_app(i), host="127.0.0.1") for i in range(3)]
    for server in servers:
        await server.start_server()
    dead = free_port()  # worker 2 is "down": nothing listens on its port
    ports = [servers[0].port, servers[1].port, dead]
    affinity = Affinity(3)

    def pick(session: str | None) -> tuple[int, str, int]:
        i = affinity.worker_of(session)
        return i, "127.0.0.1", ports[i] or 0

    router = ConnectionRouter("127.0.0.1", 0, pick)
    async with router:
        yield Routed(router, affinity, f"http://127.0.0.1:{router.port}")
    for server in servers:
        await server.close()


async def test_each_connection_reaches_its_session_s_worker_intact(routed: Routed) -> None:
    routed.affinity.assign("alpha", 1)
    routed.affinity.assign("beta", 0)
    payload = bytes(range(256)) * 4096  # 1 MiB: many reads on both sides
    # A new connection per request: a kept-alive one stays with its first session's worker.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        for session, worker in (("alpha", 1), ("beta", 0), ("alpha", 1)):
            async with http.post(
                f"{routed.url}/v1/chat/completions",
                data=payload,
                headers={"authorization": f"Bearer {session}"},
            ) as response:
                answer = await response.json()
            assert answer["worker"] == worker
            assert answer["auth"] == f"Bearer {session}"  # the credential passes untouched
            assert answer["sha"] == hashlib.sha256(payload).hexdigest()
        async with http.post(
            f"{routed.url}/s/beta/v1/responses", headers={"authorization": "Bearer x"}
        ) as response:
            assert (await response.json())["path"] == "/s/beta/v1/responses"
        async with http.post(f"{routed.url}/stream", headers={"x-api-key": "alpha"}) as response:
            text = await response.text()
        assert text == "".join(f"data: 1-{i}\n\n" for i in range(5))
    # Unregistered sessions follow the hash (worker 2 is down in this test: avoid it).
    session = next(s for s in (f"s{i}" for i in range(100)) if hashed_worker(s, 3) == 1)
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{routed.url}/v1/models?key={session}") as response,
    ):
        assert (await response.json())["worker"] == 1
    assert routed.router.routed[0] >= 1 and routed.router.routed[1] >= 3


async def test_a_kept_alive_connection_stays_on_its_first_worker(routed: Routed) -> None:
    routed.affinity.assign("alpha", 1)
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        for key in ("alpha", "beta", "alpha"):
            async with http.get(
                f"{routed.url}/v1/models", headers={"authorization": f"Bearer {key}"}
            ) as response:
                assert (await response.json())["worker"] == 1
    assert routed.router.routed[1] == 1  # one connection, three requests


async def test_a_dead_worker_is_a_502_and_a_silent_client_is_dropped(routed: Routed) -> None:
    routed.affinity.assign("gamma", 2)
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{routed.url}/v1/x", headers={"authorization": "Bearer gamma"}) as response,
    ):
        assert response.status == 502
        assert (await response.json())["error"]["type"] == "worker_unavailable"
    reader, writer = await asyncio.open_connection("127.0.0.1", routed.router.port)
    writer.close()  # no request at all
    await writer.wait_closed()
    assert await reader.read() == b""
    assert sum(routed.router.routed.values()) == 0


async def test_stopping_cuts_connections_still_relayed(routed: Routed) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", routed.router.port)
    writer.write(b"POST /v1/x HTTP/1.1\r\nHost: x\r\ncontent-length: 10\r\n\r\n12345")
    await writer.drain()
    await asyncio.sleep(0.2)  # relayed, the worker waits for the rest of the body
    await asyncio.wait_for(routed.router.stop(), 10)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    await writer.wait_closed()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", routed.router.port)
