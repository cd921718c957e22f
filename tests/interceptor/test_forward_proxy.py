"""Forward-proxy mode end to end: SDKs address the real providers through HTTPS_PROXY.

There is no internet here: that the answers arrive at all shows that nothing left for
api.openai.com or api.anthropic.com; they come from the local reference backend.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import CallRecord, CallStatus, TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.harness_stack import register
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration

SCENARIOS = """
scenarios:
  - name: solve
    turns:
      - text: Done.
"""
MESSAGES: Any = [{"role": "user", "content": "make hello.txt"}]


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


@pytest.fixture
async def backend_url(tokenizer: ChatTokenizer, tmp_path: Path) -> AsyncIterator[str]:
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    backend = Backend(BackendSettings(policy="scripted", scenarios=scenarios), tokenizer=tokenizer)
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def _start(
    upstream: str, kafka: KafkaSettings, tmp_path: Path, **overrides: Any
) -> Interceptor:
    settings = InterceptorSettings(
        upstream=upstream,
        port=0,
        admin_port=0,
        mode="forward",
        confdir=tmp_path / "mitmproxy",
        **overrides,
    )
    interceptor = Interceptor(
        settings, kafka, PublisherSettings(), StatePaths(state_dir=tmp_path / "state")
    )
    await interceptor.start()
    return interceptor


@pytest.fixture
async def forward(
    backend_url: str,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> AsyncIterator[Interceptor]:
    interceptor = await _start(backend_url, kafka_settings, tmp_path)
    try:
        yield interceptor
    finally:
        await interceptor.stop()


def _client(proxy: Interceptor) -> httpx2.AsyncClient:
    """An HTTP client as a harness would be set up: HTTPS_PROXY plus the proxy's CA."""
    # Only mitmproxy's CA: every certificate this client sees is one the proxy made.
    context = ssl.create_default_context(cafile=str(proxy.ca_cert_path))
    return httpx2.AsyncClient(proxy=proxy.url, verify=context, trust_env=False, timeout=30)


async def _records(settings: KafkaSettings, expected: int) -> list[CallRecord]:
    topic = TopicNames(settings.topic_prefix).events
    records = await read_records(settings, topic, CallRecord, expected, timeout=30)
    return sorted(records, key=lambda r: (r.session_id, r.seq))


async def test_calls_to_the_real_providers_are_answered_by_the_upstream(
    forward: Interceptor, kafka_settings: KafkaSettings, tokenizer: ChatTokenizer
) -> None:
    assert forward.ca_cert_path.parent == forward.settings.confdir
    assert forward.ca_cert_path.read_text().startswith("-----BEGIN CERTIFICATE-----")
    register(forward, "sess-fwd-openai@solve", "sess-fwd-claude@solve")
    async with (
        _client(forward) as http,
        openai.AsyncOpenAI(
            base_url="https://api.openai.com/v1",
            api_key="sess-fwd-openai@solve",
            http_client=http,
            max_retries=0,
        ) as oai,
        anthropic.AsyncAnthropic(
            base_url="https://api.anthropic.com",
            api_key="sess-fwd-claude@solve",
            http_client=http,
            max_retries=0,
        ) as claude,
    ):
        chat = await oai.chat.completions.create(model="rollstream-tiny", messages=MESSAGES)
        # The scripted backend's answer to a call offering no tools.
        assert chat.choices[0].message.content == "OK."
        stream = await oai.chat.completions.create(
            model="rollstream-tiny", messages=MESSAGES, stream=True
        )
        assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == (
            "OK."
        )
        message = await claude.messages.create(
            model="rollstream-tiny", max_tokens=200, messages=MESSAGES
        )
        assert [b.text for b in message.content if b.type == "text"] == ["OK."]
        # Token counting is on an LLM path too: answered by the upstream's tokenizer (how the
        # answer is translated is the addon's business, the same in both modes).
        counted = await claude.messages.with_raw_response.count_tokens(
            model="rollstream-tiny", messages=MESSAGES
        )
        assert counted.status_code == 200

    records = await _records(kafka_settings, 3)  # sorted by session, then seq
    assert [(r.session_id, r.seq, r.api.value, r.stream) for r in records] == [
        ("sess-fwd-claude@solve", 0, "anthropic_messages", False),
        ("sess-fwd-openai@solve", 0, "chat_completions", False),
        ("sess-fwd-openai@solve", 1, "chat_completions", True),
    ]
    for record in records:
        assert record.status is CallStatus.OK
        assert record.completion_token_ids is not None
        assert tokenizer.decode(record.completion_token_ids.to_list()) == "OK."
    assert forward.addon.recorder.counts.recorded == 3


async def test_other_traffic_is_forwarded_unchanged_and_not_recorded(
    forward: Interceptor,
) -> None:
    seen: list[dict[str, str]] = []

    async def telemetry(request: web.Request) -> web.Response:
        seen.append(dict(request.headers) | {"path": request.path_qs})
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/{tail:.*}", telemetry)
    elsewhere = TestServer(app, host="127.0.0.1")
    await elsewhere.start_server()
    try:
        async with _client(forward) as http:
            answer = await http.post(
                str(elsewhere.make_url("/s/x/events?batch=1")),
                json={"event": "started"},
                headers={"Authorization": "Bearer sess-telemetry"},
            )
    finally:
        await elsewhere.close()
    assert answer.status_code == 200 and answer.json() == {"ok": True}
    [headers] = seen
    assert headers["path"] == "/s/x/events?batch=1"
    assert headers["Authorization"] == "Bearer sess-telemetry"
    assert forward.addon.recorder.counts.recorded == 0


async def test_other_traffic_can_be_blocked(
    backend_url: str, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    proxy = await _start(backend_url, kafka_settings, tmp_path, other_traffic="block")
    try:
        async with _client(proxy) as http:
            models = await http.get("https://api.openai.com/v1/models")
            assert models.status_code == 403
            chat = await http.post(
                "https://api.openai.com/v1/chat/completions",
                json={"model": "rollstream-tiny", "messages": MESSAGES},
                headers={"Authorization": "Bearer sess-blocked"},
            )
            assert chat.status_code == 200
    finally:
        await proxy.stop()


async def test_a_websocket_is_refused_in_forward_mode_so_codex_speaks_http(
    forward: Interceptor, kafka_settings: KafkaSettings
) -> None:
    """Only reverse mode ends WebSockets; Codex falls back to HTTP on a refused upgrade."""
    register(forward, "sess-fwd-ws")
    context = ssl.create_default_context(cafile=str(forward.ca_cert_path))
    async with aiohttp.ClientSession() as client:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(
                "https://api.openai.com/v1/responses",
                proxy=forward.url,
                ssl=context,
                headers={"Authorization": "Bearer sess-fwd-ws"},
            )
    assert refused.value.status == 501
    [record] = await _records(kafka_settings, 1)
    assert record.session_id == "sess-fwd-ws" and record.status is CallStatus.ERROR
    assert record.error is not None and "reverse mode only" in record.error.message
