"""Requests the served model cannot take as sent: limits lowered, overflows in the API's words.

The reference backend answers as vLLM 0.32 does (a limit above the context refused, a prompt
over it refused); tests/dev/engine holds the same against the real vLLM.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp.test_utils import TestServer

from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import CallRecord, CallStatus, TopicNames, decompress_json
from rollstream.settings import KafkaSettings, StatePaths
from tests.engine_servers import EngineServers
from tests.harness_stack import engine_interceptor
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration

CONTEXT = 4096
MODEL = "rollstream-tiny"
LONG = "polar " * 6000  # over the context in the toy vocabulary
#: How Claude Code reads Anthropic's overflow (its bundle's own expression).
CLAUDE_CODE_OVERFLOW = re.compile(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", re.I)


@pytest.fixture
async def interceptor(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> AsyncIterator[Interceptor]:
    backend = Backend(
        BackendSettings(policy="tiny", max_model_len=CONTEXT),
        tokenizer=ChatTokenizer(default_tokenizer_dir()),
    )
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    settings = InterceptorSettings(
        upstream=str(server.make_url("")).rstrip("/"), port=0, admin_port=0
    )
    proxy = Interceptor(
        settings, kafka_settings, PublisherSettings(), StatePaths(state_dir=tmp_path / "state")
    )
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
        await server.close()


async def _post(proxy: Interceptor, path: str, body: dict[str, Any]) -> httpx.Response:
    # Async: the interceptor runs on this test's event loop.
    headers = {"authorization": "Bearer sess-limits", "x-api-key": "sess-limits"}
    async with httpx.AsyncClient(timeout=60) as client:
        return await client.post(f"{proxy.url}{path}", json=body, headers=headers)


async def test_an_output_limit_over_the_context_is_lowered_and_the_record_says_so(
    interceptor: Interceptor, kafka_settings: KafkaSettings
) -> None:
    # Claude Code asks for 32,000 tokens whatever the model; the server refuses more than its
    # context, so as sent every call would fail.
    asked = {"model": MODEL, "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]}
    answer = await _post(interceptor, "/v1/messages", asked)
    assert answer.status_code == 200, answer.text
    assert answer.json()["type"] == "message"
    [record] = await read_records(
        kafka_settings, TopicNames(kafka_settings.topic_prefix).events, CallRecord, 1
    )
    assert record.status is CallStatus.OK and record.has_tokens
    assert record.adjusted == [
        f"max_tokens 32000 above the served context of {CONTEXT} tokens: sent as {CONTEXT}"
    ]
    assert record.upstream_request is not None
    assert decompress_json(record.upstream_request)["max_tokens"] == CONTEXT
    assert record.harness_request is not None
    assert decompress_json(record.harness_request)["max_tokens"] == 32000


async def test_a_prompt_over_the_context_gets_each_apis_own_overflow_error(
    interceptor: Interceptor, kafka_settings: KafkaSettings
) -> None:
    user = [{"role": "user", "content": LONG}]
    anthropic = await _post(
        interceptor, "/v1/messages", {"model": MODEL, "max_tokens": 100, "messages": user}
    )
    assert anthropic.status_code == 400
    error = anthropic.json()["error"]
    assert error["type"] == "invalid_request_error"
    found = CLAUDE_CODE_OVERFLOW.search(error["message"])
    assert found is not None, error
    assert int(found.group(1)) > CONTEXT and int(found.group(2)) == CONTEXT

    chat = await _post(interceptor, "/v1/chat/completions", {"model": MODEL, "messages": user})
    assert chat.status_code == 400
    assert chat.json()["error"]["code"] == "context_length_exceeded"
    assert f"maximum context length is {CONTEXT} tokens" in chat.json()["error"]["message"]

    responses = await _post(interceptor, "/v1/responses", {"model": MODEL, "input": LONG})
    assert responses.status_code == 400
    assert responses.json()["error"]["code"] == "context_length_exceeded"

    gemini = await _post(
        interceptor,
        f"/v1beta/models/{MODEL}:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": LONG}]}]},
    )
    assert gemini.status_code == 400
    assert gemini.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert re.fullmatch(
        rf"The input token count \(\d+\) exceeds the maximum number of tokens allowed "
        rf"\({CONTEXT}\)\.",
        gemini.json()["error"]["message"],
    )
    # Every one recorded, failed with the server's own message.
    records = await read_records(
        kafka_settings, TopicNames(kafka_settings.topic_prefix).events, CallRecord, 4
    )
    assert [r.status for r in records] == [CallStatus.ERROR] * 4
    for record in records:
        assert record.error is not None and record.error.http_status == 400
        assert "maximum context length" in record.error.message


@pytest.mark.parametrize("family", ["qwen3"])
async def test_on_vllm_the_lowered_limit_is_taken_and_an_overflow_is_each_apis(
    family: str,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    server = engine_servers.get(family)
    async with engine_interceptor(kafka_settings, tmp_path / "state", server, family) as proxy:
        user = [{"role": "user", "content": "[scenario=solve] Write polar into hello.txt."}]
        # Above vLLM's context (the tiny model's 65,536): refused by vLLM as sent.
        asked = {"model": server.model, "max_tokens": 100_000, "messages": user}
        answer = await _post(proxy, "/v1/messages", asked)
        assert answer.status_code == 200, answer.text
        over = [{"role": "user", "content": "polar " * 70_000}]
        long = await _post(proxy, "/v1/messages", asked | {"messages": over})
        assert long.status_code == 400, long.text
        found = CLAUDE_CODE_OVERFLOW.search(long.json()["error"]["message"])
        assert found is not None, long.text
        assert int(found.group(1)) > int(found.group(2)) == server.context
        chat = await _post(proxy, "/v1/chat/completions", {"model": server.model, "messages": over})
        assert chat.status_code == 400 and chat.json()["error"]["code"] == "context_length_exceeded"
    records = await read_records(
        kafka_settings, TopicNames(kafka_settings.topic_prefix).events, CallRecord, 3
    )
    by_status = sorted(records, key=lambda r: r.status.value)
    assert [r.status for r in by_status] == [CallStatus.ERROR, CallStatus.ERROR, CallStatus.OK]
    assert by_status[2].adjusted and "max_tokens 100000" in by_status[2].adjusted[0]
