"""The console's routes answer every failure in JSON: a client of the API never parses HTML."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from aiokafka.errors import KafkaConnectionError

from rollstream.consumers.console.server import json_errors


def _raises(error: BaseException) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        raise error

    return handler


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application(middlewares=[json_errors])
    app.add_routes(
        [
            web.get("/timeout", _raises(TimeoutError("the record was not read in 10 s"))),
            web.get("/kafka", _raises(KafkaConnectionError("no broker"))),
            web.get("/bug", _raises(ValueError("secret detail"))),
            web.get("/gone", _raises(web.HTTPGone())),
        ]
    )
    started = TestServer(app, host="127.0.0.1")
    await started.start_server()
    try:
        yield started
    finally:
        await started.close()


@pytest.mark.parametrize(
    ("path", "status", "kind", "says"),
    [
        ("/timeout", 504, "timeout", "not read in 10 s"),
        ("/kafka", 503, "unavailable", "Kafka did not answer"),
        ("/bug", 500, "internal", "see its log"),
        ("/gone", 410, "http_error", "Gone"),
        ("/nowhere", 404, "http_error", "Not Found"),
    ],
)
async def test_a_failure_is_answered_in_json_with_its_status_and_kind(
    server: TestServer, path: str, status: int, kind: str, says: str
) -> None:
    async with aiohttp.ClientSession() as client, client.get(server.make_url(path)) as response:
        assert response.status == status
        assert response.content_type == "application/json"
        error = (await response.json())["error"]
        assert error["type"] == kind and says in error["message"]
        assert "secret detail" not in error["message"]  # a bug's text stays in the log
