"""Through the interceptor to the reference backend, with real Kafka: answers and records."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer

from rollstream.backend.server import Backend
from rollstream.backend.settings import BackendSettings
from rollstream.backend.tokenizer import ChatTokenizer, default_tokenizer_dir
from rollstream.clients import make_consumer, topic_partitions
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher import PublisherSettings
from rollstream.schemas import (
    AvroSerializer,
    CallRecord,
    CallStatus,
    TopicNames,
    resolve_prompt,
)
from rollstream.settings import KafkaSettings, StatePaths

pytestmark = pytest.mark.integration

SCENARIOS = """
scenarios:
  - name: solve
    turns:
      - text: I will create it.
        tool_call: {tool: shell, arguments: {command: "echo polar > hello.txt"}}
      - text: Done.
"""
TOOL_OPENAI: Any = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
TOOL_ANTHROPIC: Any = {
    "name": "Bash",
    "description": "Run a command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


@pytest.fixture
async def stack(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tokenizer: ChatTokenizer,
    tmp_path: Path,
) -> AsyncIterator[Interceptor]:
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    backend = Backend(BackendSettings(policy="scripted", scenarios=scenarios), tokenizer=tokenizer)
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    settings = InterceptorSettings(
        upstream=str(server.make_url("")).rstrip("/"), port=0, admin_port=0
    )
    interceptor = Interceptor(
        settings, kafka_settings, PublisherSettings(), StatePaths(state_dir=tmp_path / "state")
    )
    await interceptor.start()
    try:
        yield interceptor
    finally:
        await interceptor.stop()
        await server.close()


async def _records(settings: KafkaSettings, expected: int) -> list[CallRecord]:
    topic = TopicNames(settings.topic_prefix).events
    consumer = make_consumer(settings)
    await consumer.start()
    serializer = AvroSerializer()
    try:
        tps = await topic_partitions(consumer, topic)
        assert tps
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[CallRecord] = []
        async with asyncio.timeout(30):
            while len(records) < expected:
                for messages in (await consumer.getmany(timeout_ms=300)).values():
                    records += [serializer.decode_as(m.value, CallRecord) for m in messages]
        return sorted(records, key=lambda r: (r.session_id, r.seq))
    finally:
        await consumer.stop()


async def test_chat_completions_streamed_and_not(
    stack: Interceptor, kafka_settings: KafkaSettings, tokenizer: ChatTokenizer
) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{stack.url}/v1", api_key="sess-chat@solve", max_retries=0
    ) as client:
        messages: Any = [{"role": "user", "content": "make hello.txt"}]
        whole = await client.chat.completions.create(
            model="rollstream-tiny",
            messages=messages,
            tools=[TOOL_OPENAI],
            extra_body={"return_token_ids": True},
        )
        assert whole.choices[0].finish_reason == "tool_calls"
        assert whole.choices[0].message.tool_calls is not None
        # The harness asked for token ids: it keeps them; logprobs it did not ask for are gone.
        assert whole.choices[0].logprobs is None
        asked_ids = (whole.choices[0].model_extra or {})["token_ids"]
        stream = await client.chat.completions.create(
            model="rollstream-tiny", messages=messages, tools=[TOOL_OPENAI], stream=True
        )
        text, calls = "", ""
        async for chunk in stream:
            assert (
                "token_ids" not in (chunk.choices[0].model_extra or {}) if chunk.choices else True
            )
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    calls += (call.function.arguments or "") if call.function else ""
        assert text == "I will create it.\n"
        assert json.loads(calls) == {"command": "echo polar > hello.txt"}

    first, second = await _records(kafka_settings, 2)
    assert (first.seq, second.seq) == (0, 1)
    assert first.session_id == "sess-chat@solve" and not first.stream and second.stream
    assert first.completion_token_ids is not None
    assert first.completion_token_ids.to_list() == asked_ids
    for record in (first, second):
        assert record.status is CallStatus.OK and record.finish_reason == "tool_calls"
        assert record.completion_logprobs is not None
        assert len(record.completion_logprobs) == len(record.completion_token_ids or [])
        assert record.timings.ended_at is not None
    expected_prompt = tokenizer.encode(tokenizer.render(messages, [TOOL_OPENAI]))
    assert first.prompt is not None and first.prompt.suffix.to_list() == expected_prompt
    # The second call repeats the first prompt: delta-encoded against it.
    assert second.prompt is not None and second.prompt.base_call_id == first.call_id
    contexts = {first.call_id: first.prompt.suffix + first.completion_token_ids}
    assert resolve_prompt(second.prompt, contexts.get).to_list() == expected_prompt
    assert "sess-chat" not in json.dumps(second.model_dump(mode="json", exclude={"session_id"}))


async def test_anthropic_messages_with_the_official_sdk(
    stack: Interceptor, kafka_settings: KafkaSettings, tokenizer: ChatTokenizer
) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=stack.url, api_key="sess-claude@solve", max_retries=0
    )
    message = await client.messages.create(
        model="rollstream-tiny",
        max_tokens=200,
        system="Be brief.",
        tools=[TOOL_ANTHROPIC],
        messages=[{"role": "user", "content": "make hello.txt"}],
    )
    assert message.stop_reason == "tool_use"
    tool_use = next(b for b in message.content if b.type == "tool_use")
    assert tool_use.name == "Bash" and tool_use.input["command"] == "echo polar > hello.txt"
    followup: Any = [
        {"role": "user", "content": "make hello.txt"},
        {"role": "assistant", "content": [b.model_dump() for b in message.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": ""}],
        },
    ]
    async with client.messages.stream(
        model="rollstream-tiny",
        max_tokens=200,
        system="Be brief.",
        tools=[TOOL_ANTHROPIC],
        messages=followup,
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "end_turn"
    assert [b.text for b in final.content if b.type == "text"] == ["Done."]
    await client.close()

    first, second = await _records(kafka_settings, 2)
    assert first.api.value == "anthropic_messages" and second.stream
    assert second.completion_token_ids is not None
    assert tokenizer.decode(second.completion_token_ids.to_list()) == "Done."


async def test_responses_api_streamed(stack: Interceptor, kafka_settings: KafkaSettings) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{stack.url}/v1", api_key="sess-codex@solve", max_retries=0
    ) as client:
        tools: Any = [
            {
                "type": "function",
                "name": "exec_command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            }
        ]
        stream = await client.responses.create(
            model="rollstream-tiny", input="make hello.txt", tools=tools, stream=True, store=False
        )
        events = [event async for event in stream]
    done = events[-1]
    assert done.type == "response.completed"
    calls = [item for item in done.response.output if item.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"cmd": "echo polar > hello.txt"}]
    [record] = await _records(kafka_settings, 1)
    assert record.api.value == "responses" and record.completion_token_ids is not None


async def test_bad_input_is_answered_in_the_harness_format_and_recorded(
    stack: Interceptor, kafka_settings: KafkaSettings
) -> None:
    client = anthropic.AsyncAnthropic(base_url=stack.url, api_key="sess-bad", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(
            model="rollstream-tiny",
            max_tokens=10,
            messages="not a list",  # type: ignore[arg-type]
        )
    assert info.value.body["type"] == "error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(
            model="gpt-9", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    await client.close()
    records = await _records(kafka_settings, 2)
    assert all(r.status is CallStatus.ERROR for r in records)
    assert sorted(r.error.http_status or 0 for r in records if r.error) == [400, 404]


async def test_admin_port_metrics_sessions_policy_version_and_pause(
    stack: Interceptor, kafka_settings: KafkaSettings
) -> None:
    import aiohttp

    admin = stack.admin_url
    async with (
        aiohttp.ClientSession() as http,
        openai.AsyncOpenAI(
            base_url=f"{stack.url}/v1", api_key="sess-admin", max_retries=0
        ) as client,
    ):
        health = await (await http.get(f"{admin}/health")).json()
        assert health["status"] == "ok" and health["paused"] is False
        bad = await http.post(f"{admin}/admin/policy-version", json={"version": -1})
        assert bad.status == 400
        assert (await http.post(f"{admin}/admin/policy-version", json={"version": 7})).status == 200

        messages: Any = [{"role": "user", "content": "hi"}]
        paused = await (await http.post(f"{admin}/admin/pause", json={"timeout_s": 30})).json()
        assert paused == {"paused": True, "in_flight": 0, "drained": True}
        call = asyncio.create_task(
            client.chat.completions.create(model="rollstream-tiny", messages=messages, max_tokens=3)
        )
        await asyncio.sleep(0.5)
        assert not call.done()  # held while paused
        await http.post(f"{admin}/admin/resume")
        answer = await asyncio.wait_for(call, 20)
        assert answer.choices[0].message is not None

        session = await (await http.get(f"{admin}/sessions/sess-admin")).json()
        assert session == {"session": "sess-admin", "calls_recorded": 1, "in_flight": 0}
        metrics = await (await http.get(f"{admin}/metrics")).text()
        assert "rollstream_calls_total 1" in metrics
        assert "rollstream_policy_version 7" in metrics
        assert "# TYPE rollstream_spool_bytes gauge" in metrics

    [record] = await _records(kafka_settings, 1)
    assert record.policy_version == 7


async def test_unreachable_upstream_is_a_parseable_502_and_recorded(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    from rollstream.broker.config import free_port

    settings = InterceptorSettings(upstream=f"http://127.0.0.1:{free_port()}", port=0, admin_port=0)
    async with Interceptor(
        settings, kafka_settings, PublisherSettings(), StatePaths(state_dir=tmp_path)
    ) as proxy:
        client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="sess-down", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as info:
            await client.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        await client.close()
        assert info.value.status_code == 502
        assert "rollstream:" in info.value.message
        async with openai.AsyncOpenAI(
            base_url=f"{proxy.url}/v1", api_key="sess-down", max_retries=0
        ) as oai:
            with pytest.raises(openai.APIStatusError) as oinfo:
                await oai.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
        assert oinfo.value.status_code == 502 and "rollstream:" in oinfo.value.message
    records = await _records(kafka_settings, 2)
    assert all(r.status is CallStatus.ERROR for r in records)
    assert {r.error.type for r in records if r.error} == {"upstream_unreachable"}


async def test_a_broker_outage_does_not_touch_the_harness_and_loses_no_call(
    stack: Interceptor, kafka_settings: KafkaSettings
) -> None:
    """Records wait in the spool while the broker cannot take them, then arrive."""
    async with openai.AsyncOpenAI(
        base_url=f"{stack.url}/v1", api_key="sess-out", max_retries=0
    ) as client:
        messages: Any = [{"role": "user", "content": "hi"}]
        # Point the publisher at a broker that is not there, as if it had died.
        stack.publisher.kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1", topic_prefix="x")
        stack.publisher._failed(ConnectionError("broker gone"))  # drop the live producer
        for _ in range(3):
            answer = await client.chat.completions.create(
                model="rollstream-tiny", messages=messages, max_tokens=3
            )
            assert answer.choices  # the harness is served as usual
        async with asyncio.timeout(30):
            while stack.publisher.metrics.spooled < 3:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        stack.publisher.kafka = kafka_settings  # the broker is back
    records = await _records(kafka_settings, 3)
    assert [r.seq for r in records] == [0, 1, 2]
    assert stack.publisher.spool.empty()


async def test_a_harness_hanging_up_mid_stream_is_recorded_as_cancelled(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tokenizer: ChatTokenizer,
    tmp_path: Path,
) -> None:
    import aiohttp

    backend = Backend(BackendSettings(tpot_ms=50), tokenizer=tokenizer)  # a slow, long stream
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    settings = InterceptorSettings(
        upstream=str(server.make_url("")).rstrip("/"), port=0, admin_port=0
    )
    try:
        async with Interceptor(
            settings, kafka_settings, PublisherSettings(), StatePaths(state_dir=tmp_path)
        ) as proxy:
            body = {
                "model": "rollstream-tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "max_tokens": 200,
                "ignore_eos": True,
            }
            async with aiohttp.ClientSession() as http:
                response = await http.post(
                    f"{proxy.url}/v1/chat/completions",
                    json=body,
                    headers={"Authorization": "Bearer sess-gone"},
                )
                await response.content.readline()  # the stream has started
                response.close()  # the harness goes away
            [record] = await _records(kafka_settings, 1)
    finally:
        await server.close()
    assert record.status is CallStatus.CANCELLED
    assert record.error is not None and record.error.type == "cancelled"
    assert record.completion_token_ids is not None
    assert 0 < len(record.completion_token_ids) < 200  # what was sampled before the hang-up
