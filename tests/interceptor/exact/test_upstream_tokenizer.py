"""Exact context verifies the upstream's vocabulary and template (/tokenize) before it is used."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.host import free_port
from rollstream.interceptor.exact import upstream
from rollstream.interceptor.exact.upstream import ExactUpstream
from rollstream.interceptor.exact.verify import Verdict
from rollstream.interceptor.settings import InterceptorSettings
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


async def test_an_upstream_without_tokenize_is_not_yet_exact() -> None:
    # It was trusted: prompts built from tokens went to a server nobody had compared with.
    app = web.Application()
    server = TestServer(app, host="127.0.0.1")  # every path answers 404
    await server.start_server()
    try:
        exact = await _checked(server)
    finally:
        await server.close()
    assert exact.context is not None and exact.verdict.state == "unverified"
    info, body = await exact.prepare_off_loop("s", {"model": "m", "messages": []}, None)
    assert body is None and info is not None
    assert info.note.startswith("not yet exact") and "no /tokenize" in info.note


async def test_an_upstream_that_comes_up_later_is_verified_before_an_exact_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(upstream, "RECHECK_S", 0.0)
    port = free_port()
    settings = InterceptorSettings(
        upstream=f"http://127.0.0.1:{port}",
        port=0,
        admin_port=0,
        context="exact",
        tokenizer=default_tokenizer_dir(),
    )
    exact = ExactUpstream(settings)
    await exact.check_upstream(settings)  # nothing listens yet (a vLLM still loading)
    assert exact.verdict.state == "unverified" and "did not answer" in exact.verdict.reason
    server = TestServer(Backend(BackendSettings()).app(), host="127.0.0.1", port=port)
    await server.start_server()
    try:
        info, _ = await exact.prepare_off_loop("s", {"model": "m", "messages": []}, None)
    finally:
        await server.close()
    verdict: Verdict = exact.verdict  # rechecked meanwhile (mypy narrowed it to the first)
    assert verdict.state == "verified"
    assert info is not None and not info.note.startswith("not yet exact")


async def test_an_upstream_with_another_template_refuses_it_showing_both_renderings(
    tmp_path: Path,
) -> None:
    # The same vocabulary, another chat template: only the rendered conversation can tell.
    folder = tmp_path / "tokenizer"
    shutil.copytree(default_tokenizer_dir(), folder)
    template = folder / "chat_template.jinja"
    template.write_text(template.read_text().replace("<|im_start|>", "<|im_start|> ", 1))
    server = TestServer(
        Backend(BackendSettings(), tokenizer=ChatTokenizer(folder)).app(), host="127.0.0.1"
    )
    await server.start_server()
    try:
        exact = await _checked(server)
    finally:
        await server.close()
    assert exact.context is None and exact.verdict.state == "refused"
    assert "chat template" in exact.unavailable and "first difference at id 1" in exact.unavailable
    assert "⟨here⟩" in exact.unavailable


@pytest.mark.parametrize("family", ["qwen3", "llama-3", "mistral"])
async def test_an_upstream_serving_the_family_verifies_it(family: str) -> None:
    # The probe conversation must be one every family renders (Mistral's call ids are nine
    # letters and digits): a probe the family refuses would refuse exact context everywhere.
    backend = Backend(BackendSettings(family=family))
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    settings = InterceptorSettings(
        upstream=str(server.make_url("")).rstrip("/"),
        port=0,
        admin_port=0,
        context="exact",
        family=family,
    )
    try:
        exact = ExactUpstream(settings)
        await exact.check_upstream(settings)
    finally:
        await server.close()
    assert exact.verdict.state == "verified", exact.verdict.reason
