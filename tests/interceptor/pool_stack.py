"""An interceptor worker pool (real worker processes) in front of the scripted backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.pool import InterceptorPool
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.settings import KafkaSettings, StatePaths
from tests.chaos.upstreams import scripted_backend

MODEL = "rollstream-tiny"


@asynccontextmanager
async def scripted_upstream(directory: Path, tpot_ms: float = 1.0) -> AsyncIterator[str]:
    """The scripted reference backend on a free port; its base URL."""
    backend = scripted_backend(directory, ChatTokenizer(default_tokenizer_dir()), tpot_ms)
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@asynccontextmanager
async def interceptor_pool(
    kafka: KafkaSettings, upstream: str, workers: int = 2, **settings: Any
) -> AsyncIterator[InterceptorPool]:
    """A started pool of ``workers`` (free ports; the test's state directory)."""
    pool = InterceptorPool(
        InterceptorSettings(
            workers=workers,
            upstream=upstream,
            port=0,
            admin_port=0,
            follow_policy=False,
            drain_timeout_s=2,
            upstream_model=MODEL,
            **settings,
        ),
        kafka,
        PublisherSettings(linger_ms=20),
        StatePaths(),
    )
    async with pool:
        yield pool


def client(headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    """An HTTP client opening a connection per request, sending ``headers`` with each.

    Through the router a kept-alive connection stays with its first session's worker: a
    harness uses one key per client, these tests use several.
    """
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True), headers=headers)


async def chat(
    http: aiohttp.ClientSession, base_url: str, session: str, text: str = "hi"
) -> tuple[int, dict[str, Any]]:
    """One Chat Completions call as ``session``; status and body."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    async with http.post(
        f"{base_url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {session}"},
    ) as response:
        return response.status, await response.json(content_type=None)


async def admin(
    http: aiohttp.ClientSession, url: str, method: str = "GET", body: Any = None
) -> tuple[int, dict[str, Any]]:
    """An admin request; status and JSON body."""
    async with http.request(method, url, json=body) as response:
        return response.status, await response.json(content_type=None)


async def metrics(http: aiohttp.ClientSession, admin_url: str) -> dict[str, float]:
    """The admin port's samples by series (``name`` or ``name{worker="i"}``)."""
    async with http.get(f"{admin_url}/metrics") as response:
        text = await response.text()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            values[series] = float(value)
    return values


def summed(values: dict[str, float], name: str) -> float:
    """A family's per-worker lines added up (the pool writes no total of its own)."""
    return sum(v for series, v in values.items() if series.startswith(f'{name}{{worker="'))
