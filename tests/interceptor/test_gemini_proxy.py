"""Gemini's generateContent through the interceptor, with Google's own SDK (google-genai).

The reference backend answers the scripted task; the records must carry its token ids, the
session must come from the API key (header or ``key`` parameter) and never be forwarded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from google import genai
from google.genai import types

from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import ApiKind, CallRecord, CallStatus, TopicNames
from rollstream.schemas.calls import SessionRequests
from rollstream.settings import KafkaSettings, StatePaths
from tests.harness_stack import register
from tests.interceptor.test_interceptor import SCENARIOS
from tests.kafka_reading import read_records

pytestmark = [
    pytest.mark.integration,
    # google-genai subclasses aiohttp's ClientSession, which aiohttp warns about: theirs, not ours.
    pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning"),
]

SHELL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="run_shell_command",
            description="Run a shell command",
            parameters_json_schema={
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        )
    ]
)
CONFIG = types.GenerateContentConfig(
    tools=[SHELL],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)


@pytest.fixture
async def interceptor(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> AsyncIterator[Interceptor]:
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    backend = Backend(BackendSettings(policy="scripted", scenarios=scenarios), tokenizer=tokenizer)
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    settings = InterceptorSettings(
        upstream=str(server.make_url("")).rstrip("/"),
        port=0,
        admin_port=0,
        upstream_model="rollstream-tiny",
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


def _client(url: str, key: str) -> genai.Client:
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=url))


async def _records(settings: KafkaSettings, expected: int) -> list[CallRecord]:
    topic = TopicNames(settings.topic_prefix).events
    records = await read_records(settings, topic, CallRecord, expected, timeout=30)
    return sorted(records, key=lambda r: (r.session_id, r.seq))


async def test_a_tool_task_whole_then_streamed_with_the_sdk(
    interceptor: Interceptor, kafka_settings: KafkaSettings
) -> None:
    register(interceptor, "gemini-sess@solve")
    client = _client(interceptor.url, "gemini-sess@solve")
    contents: list[Any] = [
        types.Content(role="user", parts=[types.Part(text="Create hello.txt with polar.")])
    ]
    first = await client.aio.models.generate_content(
        model="gemini-2.5-pro", contents=contents, config=CONFIG
    )
    calls = first.function_calls or []
    assert [c.name for c in calls] == ["run_shell_command"]
    assert calls[0].args == {"command": "echo polar > hello.txt"}
    assert first.candidates and first.candidates[0].finish_reason == types.FinishReason.STOP
    assert first.usage_metadata and first.usage_metadata.prompt_token_count
    assert first.candidates[0].content is not None
    contents += [
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=calls[0].id, name="run_shell_command", response={"output": ""}
                    )
                )
            ],
        ),
    ]
    text = ""
    finish = None
    async for chunk in await client.aio.models.generate_content_stream(
        model="gemini-2.5-pro", contents=contents, config=CONFIG
    ):
        text += chunk.text or ""
        if chunk.candidates and chunk.candidates[0].finish_reason:
            finish = chunk.candidates[0].finish_reason
    await client.aio.aclose()
    assert text == "Done." and finish == types.FinishReason.STOP

    one, two = await _records(kafka_settings, 2)
    assert (one.session_id, two.session_id) == ("gemini-sess@solve", "gemini-sess@solve")
    assert {one.api, two.api} == {ApiKind.GEMINI}
    assert not one.stream and two.stream
    for record in (one, two):
        assert record.status is CallStatus.OK and record.has_tokens
        assert record.model == "gemini-2.5-pro"  # the harness's model, from the path
        assert record.completion_logprobs is not None
    # The second prompt extends the first call's context (the tool call re-rendered aside).
    assert two.prompt is not None and two.prompt.base_call_id == one.call_id
    requests = SessionRequests([one, two])
    upstream = requests.upstream(two.call_id)
    assert [m["role"] for m in upstream["messages"]] == ["user", "assistant", "tool"]
    assert upstream["messages"][1]["tool_calls"][0]["id"] == calls[0].id
    assert "gemini-sess" not in json.dumps(requests.harness(two.call_id))


async def test_the_key_parameter_is_the_session_and_is_not_forwarded(
    interceptor: Interceptor, kafka_settings: KafkaSettings
) -> None:
    register(interceptor, "keyed@solve", "b")  # keys their launcher registered
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    url = f"{interceptor.url}/v1beta/models/gemini-x:streamGenerateContent"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, params={"alt": "sse", "key": "keyed@solve"}, json=body) as r:
            assert r.status == 200
            events = [
                json.loads(line[6:])
                for line in (await r.text()).splitlines()
                if line[:6] == "data: "
            ]
        assert events[-1]["candidates"][0]["finishReason"] == "STOP"
        count_url = f"{interceptor.url}/v1beta/models/gemini-x:countTokens"
        async with http.post(count_url, json=body, headers={"x-goog-api-key": "k"}) as r:
            assert r.status == 200
            assert (await r.json())["totalTokens"] > 0
        async with http.post(
            url, params={"alt": "sse"}, json={"contents": "nope"}, headers={"x-goog-api-key": "b"}
        ) as r:
            assert r.status == 400
            error = (await r.json())["error"]
            assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    bad, keyed = await _records(kafka_settings, 2)  # sorted by session
    assert keyed.session_id == "keyed@solve" and keyed.status is CallStatus.OK
    assert "keyed@solve" not in json.dumps(keyed.model_dump(mode="json", exclude={"session_id"}))
    assert bad.session_id == "b" and bad.status is CallStatus.ERROR and bad.error is not None
    assert bad.error.http_status == 400
