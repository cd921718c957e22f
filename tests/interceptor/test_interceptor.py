"""Through the interceptor to the reference backend, with real Kafka: answers and records."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer

from rollstream.apis.anthropic import anthropic_to_chat
from rollstream.dev.backend.engine import Latency
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.sessions import AFFINITY_HEADER, affinity_key
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import (
    CallRecord,
    CallStatus,
    TopicNames,
    decompress_json,
    resolve_prompt,
)
from rollstream.settings import KafkaSettings, StatePaths
from tests.harness_stack import register
from tests.kafka_reading import read_records
from tests.waiting import until

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
    records = await read_records(settings, topic, CallRecord, expected)
    return sorted(records, key=lambda r: (r.session_id, r.seq))


async def test_chat_completions_streamed_and_not(
    stack: Interceptor, kafka_settings: KafkaSettings, tokenizer: ChatTokenizer
) -> None:
    register(stack, "sess-chat@solve")
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
    # Token counting: answered in Anthropic's shape with the upstream tokenizer, not recorded.
    counted = await client.messages.count_tokens(
        model="rollstream-tiny", system="Be brief.", tools=[TOOL_ANTHROPIC], messages=followup
    )
    await client.close()
    chat = anthropic_to_chat(
        {"system": "Be brief.", "tools": [TOOL_ANTHROPIC], "messages": followup}, "m"
    )
    assert counted.input_tokens == len(
        tokenizer.encode(tokenizer.render(chat["messages"], chat["tools"]))
    )

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
    register(stack, "sess-admin")
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
        paused = await (await http.post(f"{admin}/admin/pause", json={})).json()
        assert paused == {"paused": True, "in_flight": 0, "drained": True, "lease_s": None}
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
        assert "rollstream_exact_sessions_evicted_total 0" in metrics
        assert "# TYPE rollstream_spool_bytes gauge" in metrics

    [record] = await _records(kafka_settings, 1)
    assert record.policy_version == 7


async def test_unreachable_upstream_is_a_parseable_502_and_recorded(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    from rollstream.host import free_port

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
        stack.publisher._connection.failed(ConnectionError("broker gone"))  # drop the producer
        for _ in range(3):
            answer = await client.chat.completions.create(
                model="rollstream-tiny", messages=messages, max_tokens=3
            )
            assert answer.choices  # the harness is served as usual
        await until(lambda: stack.publisher.metrics.spooled >= 3, 30, "three records spooled")
        stack.publisher.kafka = kafka_settings  # the broker is back
    records = await _records(kafka_settings, 3)
    assert [r.seq for r in records] == [0, 1, 2]
    # Readers can see the records before their acks reach the publisher, which empties the
    # spool on those acks: wait for that (a fresh-clone run under load saw it a moment later).
    await until(stack.publisher.spool.empty, 30, "the spool emptied once the acks came")


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


# -- upstream timeout ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _proxy(
    upstream: str, kafka: KafkaSettings, tmp_path: Path, **options: Any
) -> AsyncIterator[Interceptor]:
    # Upstreams that never answer are given the context length (``max_model_len``): asked for
    # it, they would hold the start and count one more connection.
    settings = InterceptorSettings(upstream=upstream, port=0, admin_port=0, **options)
    paths = StatePaths(state_dir=tmp_path / "state")
    async with Interceptor(settings, kafka, PublisherSettings(), paths) as proxy:
        yield proxy


@contextlib.asynccontextmanager
async def _backend(backend: Backend) -> AsyncIterator[str]:
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def _assert_timeouts(records: list[CallRecord]) -> None:
    for record in records:
        assert record.status is CallStatus.ERROR and record.error is not None
        assert record.error.type == "upstream_timeout"
        assert (record.error.http_status, record.error.retriable) == (504, True)
        assert "no response headers within 0.5 s" in record.error.message


async def test_a_slow_upstream_is_a_504_in_the_harness_format_and_recorded(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tokenizer: ChatTokenizer,
    tmp_path: Path,
) -> None:
    backend = Backend(BackendSettings(ttft_ms=5000), tokenizer=tokenizer)
    messages: Any = [{"role": "user", "content": "hi"}]
    async with (
        _backend(backend) as upstream,
        _proxy(
            upstream, kafka_settings, tmp_path, upstream_timeout_s=0.5, max_model_len=4096
        ) as proxy,
    ):
        claude = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="sess-slow", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as info:
            await claude.messages.create(model="rollstream-tiny", max_tokens=5, messages=messages)
        assert info.value.status_code == 504
        body: Any = info.value.body
        assert body["type"] == "error" and body["error"]["type"] == "api_error"
        assert "no response headers within 0.5 s" in body["error"]["message"]
        async with openai.AsyncOpenAI(
            base_url=f"{proxy.url}/v1", api_key="sess-slow", max_retries=0
        ) as client:
            with pytest.raises(openai.APIStatusError) as oinfo:
                await client.chat.completions.create(model="rollstream-tiny", messages=messages)
            assert oinfo.value.status_code == 504
            assert "no response headers within 0.5 s" in oinfo.value.message
            backend.latency = Latency()  # the upstream recovers: calls go through again
            answer = await client.chat.completions.create(
                model="rollstream-tiny", messages=messages, max_tokens=3
            )
            assert answer.choices[0].message is not None
        async with claude.messages.stream(
            model="rollstream-tiny", max_tokens=3, messages=messages
        ) as stream:
            assert (await stream.get_final_message()).stop_reason is not None
        await claude.close()
        assert len(proxy.addon.deadlines) == 0  # every timer was stopped
    records = await _records(kafka_settings, 4)
    assert [r.api.value for r in records] == [
        "anthropic_messages",
        "chat_completions",
        "chat_completions",
        "anthropic_messages",
    ]
    _assert_timeouts(records[:2])
    assert all(r.status is CallStatus.OK for r in records[2:])


class SilentUpstream:
    """Reads each request and answers nothing until the proxy hangs up; then answers anyway.

    With ``answer_at_once`` set it answers at once instead: a whole Chat Completions answer.
    """

    ANSWER = json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "late"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()

    def __init__(self) -> None:
        self.answer_at_once = False
        self.url = ""
        self.connections = 0
        self.requests = 0
        self.hung_up = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> SilentUpstream:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        answer += b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (
            len(self.ANSWER),
            self.ANSWER,
        )
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
            await reader.readexactly(int(length.group(1)) if length else 0)
            self.requests += 1
            if not self.answer_at_once:
                await reader.read()  # returns at EOF: when the proxy hangs up
                self.hung_up += 1
            writer.write(answer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            # Hung up on before the request was whole: on a loaded machine the deadline can
            # pass while the proxy is still connecting, and it gives the connect up (a 504 too).
            self.hung_up += 1
        writer.close()


async def test_streamed_calls_to_a_silent_upstream_get_a_504_and_it_is_hung_up_on(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    async with (
        SilentUpstream() as upstream,
        _proxy(
            upstream.url, kafka_settings, tmp_path, upstream_timeout_s=0.5, max_model_len=4096
        ) as proxy,
        openai.AsyncOpenAI(
            base_url=f"{proxy.url}/v1", api_key="sess-silent", max_retries=0
        ) as client,
    ):
        with pytest.raises(openai.APIStatusError) as chat:
            await client.chat.completions.create(model="m", messages=messages, stream=True)
        with pytest.raises(openai.APIStatusError) as responses:
            await client.responses.create(model="m", input="hi", stream=True)
        claude = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="sess-silent", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as messages_api:
            await claude.messages.create(model="m", max_tokens=5, messages=messages, stream=True)
        await claude.close()
        for error in (chat.value, responses.value, messages_api.value):
            assert error.status_code == 504
            assert "no response headers within 0.5 s" in error.message
        # The proxy hung up on the upstream, which answered anyway, too late to be read. (A
        # liveness wait: on a loaded 2-core machine the hang-ups can take seconds to be seen.)
        deadline = time.monotonic() + 60
        while upstream.hung_up < 3 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        assert upstream.hung_up == 3, f"{upstream.hung_up} of 3 upstream connections hung up on"
        upstream.answer_at_once = True
        answer = await client.chat.completions.create(model="m", messages=messages)
        assert answer.choices[0].message.content == "late"
        assert upstream.connections == 4
        await asyncio.sleep(0.2)
        assert proxy.addon.recorder.counts.recorded == 4  # the late answers made no records
    records = await _records(kafka_settings, 4)
    assert sorted(r.api.value for r in records[:3]) == [
        "anthropic_messages",
        "chat_completions",
        "responses",
    ]
    _assert_timeouts(records[:3])
    assert all(r.stream for r in records[:3])
    assert records[3].status is CallStatus.OK


async def test_a_connect_that_hangs_is_given_up_with_a_504(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    """An upstream whose accept queue is full drops SYNs: connects hang, as to a dead host."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = listener.getsockname()[1]
    fillers = [socket.socket() for _ in range(3)]
    for filler in fillers:
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
    try:
        upstream = f"http://127.0.0.1:{port}"
        async with _proxy(
            upstream, kafka_settings, tmp_path, upstream_timeout_s=0.5, max_model_len=4096
        ) as proxy:
            claude = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="sess-x", max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as info:
                await claude.messages.create(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
                )
            await claude.close()
    finally:
        for sock in (*fillers, listener):
            sock.close()
    assert info.value.status_code == 504
    assert "no response headers within 0.5 s" in info.value.message
    [record] = await _records(kafka_settings, 1)
    _assert_timeouts([record])


# -- synthesize mode ----------------------------------------------------------------------------


async def test_synthesize_mode_streams_whole_answers_with_their_token_ids(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tokenizer: ChatTokenizer,
    tmp_path: Path,
) -> None:
    import aiohttp

    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    backend = Backend(BackendSettings(policy="scripted", scenarios=scenarios), tokenizer=tokenizer)
    messages: Any = [{"role": "user", "content": "make hello.txt"}]
    body = {"model": "rollstream-tiny", "messages": messages, "tools": [TOOL_OPENAI]}
    async with (
        _backend(backend) as upstream,
        _proxy(upstream, kafka_settings, tmp_path, stream_mode="synthesize") as proxy,
        aiohttp.ClientSession() as http,
    ):
        register(proxy, "sess-synth@solve", "sess-synth-claude@solve")
        # As the interceptor will ask for the session below (the scripted draws follow the key).
        affinity = {AFFINITY_HEADER: affinity_key("sess-synth@solve")}
        direct = await (
            await http.post(
                f"{upstream}/v1/chat/completions",
                json=body | {"return_token_ids": True},
                headers=affinity,
            )
        ).json()
        async with openai.AsyncOpenAI(
            base_url=f"{proxy.url}/v1", api_key="sess-synth@solve", max_retries=0
        ) as client:
            stream = await client.chat.completions.create(
                model="rollstream-tiny", messages=messages, tools=[TOOL_OPENAI], stream=True
            )
            assert stream.response.headers["content-type"] == "text/event-stream"
            text, calls, names = "", "", []
            async for chunk in stream:
                assert chunk.usage is None  # not asked for
                for choice in chunk.choices:
                    assert "token_ids" not in (choice.model_extra or {})
                    assert choice.logprobs is None
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        assert call.function is not None
                        names += [call.function.name] if call.function.name else []
                        calls += call.function.arguments or ""
        assert text == "I will create it.\n" and names == ["bash"]
        assert json.loads(calls) == {"command": "echo polar > hello.txt"}

        claude = anthropic.AsyncAnthropic(
            base_url=proxy.url, api_key="sess-synth-claude@solve", max_retries=0
        )
        async with claude.messages.stream(
            model="rollstream-tiny",
            max_tokens=200,
            tools=[TOOL_ANTHROPIC],
            messages=[{"role": "user", "content": "make hello.txt"}],
        ) as events:
            kinds = [event.type async for event in events]
            final = await events.get_final_message()
        await claude.close()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.stop_reason == "tool_use"
    tool_use = next(b for b in final.content if b.type == "tool_use")
    assert tool_use.name == "Bash" and tool_use.input["command"] == "echo polar > hello.txt"

    by_api = {r.api.value: r for r in await _records(kafka_settings, 2)}
    chat, claude_record = by_api["chat_completions"], by_api["anthropic_messages"]
    for record in (chat, claude_record):
        assert record.stream and record.status is CallStatus.OK
        assert record.finish_reason == "tool_calls"
        assert record.completion_token_ids is not None and record.completion_logprobs is not None
        assert len(record.completion_logprobs) == len(record.completion_token_ids)
        assert record.upstream_request is not None
        sent = decompress_json(record.upstream_request)
        assert sent["stream"] is False and "stream_options" not in sent
    # The ids the backend sampled, exactly: asked for whole, they came with the answer.
    assert chat.completion_token_ids is not None
    assert chat.completion_token_ids.to_list() == direct["choices"][0]["token_ids"]
    assert chat.prompt is not None and chat.prompt.suffix.to_list() == direct["prompt_token_ids"]
    expected_prompt = tokenizer.encode(tokenizer.render(messages, [TOOL_OPENAI]))
    assert direct["prompt_token_ids"] == expected_prompt


async def test_a_published_policy_version_is_stamped_into_later_calls(
    stack: Interceptor, kafka_settings: KafkaSettings
) -> None:
    from rollstream.kafka.control import publish_policy_version

    async def one_call(session: str) -> None:
        async with openai.AsyncOpenAI(
            base_url=f"{stack.url}/v1", api_key=session, max_retries=0
        ) as client:
            await client.chat.completions.create(
                model="rollstream-tiny", messages=[{"role": "user", "content": "hi"}]
            )

    register(stack, "sess-before", "sess-after")
    await one_call("sess-before")
    await publish_policy_version(kafka_settings, 5, publisher="trainer-a")
    for _ in range(100):  # the follower picks it up in the background
        if stack.addon.policy_version == 5:
            break
        await asyncio.sleep(0.1)
    await one_call("sess-after")
    records = {r.session_id: r for r in await _records(kafka_settings, 2)}
    assert records["sess-before"].policy_version == 0
    assert records["sess-after"].policy_version == 5
