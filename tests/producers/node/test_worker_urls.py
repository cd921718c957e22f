"""Where the node points a pool's harness: at its worker if reachable, else at the pool."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from rollstream.host import free_port
from rollstream.producers.node.service import WorkerUrls, worker_url
from rollstream.producers.node.settings import NodeSettings

pytestmark = pytest.mark.integration

POOL = "http://pool.invalid:18100"  # the router, as the node reaches it (a remapped port, say)


@pytest.fixture
async def listening() -> AsyncIterator[tuple[int, list[int]]]:
    """A TCP server on 127.0.0.1 standing in for a worker's proxy port; connections counted."""
    connections: list[int] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], connections
    server.close()
    await server.wait_closed()


def _reply(url: str, worker: int = 1) -> dict[str, object]:
    return {"registered": True, "worker": worker, "url": url}


def test_the_worker_url_is_the_pools_with_the_base_urls_path() -> None:
    assert worker_url(POOL, _reply("http://10.0.0.5:41234")) == "http://10.0.0.5:41234"
    assert worker_url(f"{POOL}/root", _reply("http://[::1]:41234")) == "http://[::1]:41234/root"
    # One interceptor names no worker: the node's base_url, which may be a mapped port.
    assert worker_url(POOL, {"registered": True, "url": "http://127.0.0.1:8100"}) is None
    assert worker_url(POOL, {}) is None
    assert worker_url(POOL, _reply("http://127.0.0.1")) is None  # no port
    assert worker_url(POOL, _reply("http://127.0.0.1:99999")) is None


async def test_direct_calls_a_reachable_worker_at_the_address_the_pool_named(
    listening: tuple[int, list[int]],
) -> None:
    port, connections = listening
    urls = WorkerUrls(POOL, "direct")
    url = f"http://127.0.0.1:{port}"
    # Not on the host the node knows the pool by: there, behind the remapping, it is not.
    assert await urls.for_reply(_reply(url)) == url
    assert await asyncio.gather(*(urls.for_reply(_reply(url)) for _ in range(5))) == [url] * 5
    assert len(connections) == 1  # checked once


async def test_direct_falls_back_to_the_pool_once_warned_when_the_worker_is_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    urls = WorkerUrls(POOL, "direct", connect_timeout_s=0.5)
    closed = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="rollstream.producers.node.service"):
        answers = await asyncio.gather(*(urls.for_reply(_reply(closed)) for _ in range(3)))
        assert await urls.for_reply(_reply(closed)) is None
    assert answers == [None] * 3  # None: the node's base_url, the pool's router
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert closed in warning.getMessage() and POOL in warning.getMessage()


async def test_pool_mode_always_sends_the_harness_to_the_router(
    listening: tuple[int, list[int]],
) -> None:
    port, connections = listening
    urls = WorkerUrls(POOL, "pool")
    assert await urls.for_reply(_reply(f"http://127.0.0.1:{port}")) is None
    assert connections == []  # nothing checked


def test_the_mode_is_a_node_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert NodeSettings().worker_urls == "direct"
    monkeypatch.setenv("ROLLSTREAM_NODE_WORKER_URLS", "pool")
    monkeypatch.setenv("ROLLSTREAM_NODE_REGISTRATION_TIMEOUT_S", "12.5")
    settings = NodeSettings()
    assert (settings.worker_urls, settings.registration_timeout_s) == ("pool", 12.5)


async def test_an_address_that_failed_is_checked_again_after_a_while() -> None:
    # A worker caught restarting during the first check is not routed around for good.
    port = free_port()
    urls = WorkerUrls(POOL, "direct", connect_timeout_s=0.5, recheck_s=0.2)
    url = f"http://127.0.0.1:{port}"
    assert await urls.for_reply(_reply(url)) is None
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)
    async with server:
        assert await urls.for_reply(_reply(url)) is None  # still within recheck_s
        await asyncio.sleep(0.25)
        assert await urls.for_reply(_reply(url)) == url
