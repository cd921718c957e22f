"""At start, exact context compares the interceptor's tokenizer with the upstream's (/tokenize)."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rollstream.capture.interceptor.exact.upstream import ExactUpstream
from rollstream.capture.interceptor.settings import InterceptorSettings
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.tokenizer import ChatTokenizer
from tests.dev.backend.conftest import other_tokenizer  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration


async def _checked(server: TestServer) -> ExactUpstream:
    settings = InterceptorSettings(
        upstream=str(server.make_url("")).rstrip("/"),
        port=0,
        admin_port=0,
        context="exact",
        tokenizer=default_tokenizer_dir(),
    )
    exact = ExactUpstream(settings)
    assert exact.context is not None
    await exact.check_upstream(settings)
    return exact


async def test_an_upstream_with_the_same_vocabulary_keeps_exact_context() -> None:
    server = TestServer(Backend(BackendSettings()).app(), host="127.0.0.1")
    await server.start_server()
    try:
        assert (await _checked(server)).context is not None
    finally:
        await server.close()


async def test_an_upstream_with_another_vocabulary_refuses_it_naming_both(
    other_tokenizer: ChatTokenizer,  # noqa: F811
) -> None:
    server = TestServer(Backend(BackendSettings(), tokenizer=other_tokenizer).app())
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    try:
        exact = await _checked(server)
    finally:
        await server.close()
    assert exact.context is None
    assert "disagree" in exact.unavailable and str(default_tokenizer_dir()) in exact.unavailable
    assert url in exact.unavailable
    info, body = exact.prepare("s", {"model": "m", "messages": []}, None)
    assert body is None and info is not None and "disagree" in info.note


async def test_an_upstream_without_tokenize_is_trusted() -> None:
    app = web.Application()
    server = TestServer(app, host="127.0.0.1")  # every path answers 404
    await server.start_server()
    try:
        assert (await _checked(server)).context is not None
    finally:
        await server.close()
