"""Exact context through the interceptor: the reference backend, real Kafka, the official SDKs.

The reference backend's chat template re-renders a tool call differently from the text the
model sampled, so an ordinary second prompt does not start with the first prompt and its
completion; in exact mode it does, token for token.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer

from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.exact.sessions import FIRST_CALL, NOT_APPENDED
from rollstream.interceptor.exact.upstream import CONTEXT_HEADER
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.sessions import SESSION_HEADER
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import (
    CallRecord,
    CallStatus,
    ContextMode,
    TokenIds,
    TopicNames,
    resolve_prompt,
)
from rollstream.settings import KafkaSettings, StatePaths
from tests.interceptor.test_interceptor import SCENARIOS, TOOL_ANTHROPIC, TOOL_OPENAI
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration

Start = Callable[..., Awaitable[Interceptor]]


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


@pytest.fixture
async def start(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tokenizer: ChatTokenizer,
    tmp_path: Path,
) -> AsyncIterator[Start]:
    """Starts the reference backend, and an interceptor with the given settings (stopping the
    previous one)."""
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    backend = Backend(BackendSettings(policy="scripted", scenarios=scenarios), tokenizer=tokenizer)
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    started: list[Interceptor] = []

    async def create(**overrides: Any) -> Interceptor:
        # One at a time: mitmproxy's context is global to the process.
        while started:
            await started.pop().stop()
        settings = InterceptorSettings(
            upstream=str(server.make_url("")).rstrip("/"), port=0, admin_port=0, **overrides
        )
        interceptor = Interceptor(
            settings, kafka_settings, PublisherSettings(), StatePaths(state_dir=tmp_path / "s")
        )
        await interceptor.start()
        started.append(interceptor)
        return interceptor

    try:
        yield create
    finally:
        for interceptor in started:
            await interceptor.stop()
        await server.close()


async def _records(settings: KafkaSettings, expected: int) -> list[CallRecord]:
    topic = TopicNames(settings.topic_prefix).events
    records = await read_records(settings, topic, CallRecord, expected, timeout=30)
    return sorted(records, key=lambda r: (r.session_id, r.seq))


def _context(record: CallRecord) -> TokenIds:
    assert record.prompt is not None and record.completion_token_ids is not None
    assert record.prompt.base_call_id is None
    return record.prompt.suffix + record.completion_token_ids


async def _chat_session(
    url: str, session: str, stream: bool, headers: dict[str, str] | None = None
) -> list[str]:
    """The scripted two-turn task over Chat Completions; the answers' texts.

    The session is named by header, as a launcher that chose it does (a key nobody registered
    would be recorded as its keyed hash).
    """
    async with openai.AsyncOpenAI(
        base_url=f"{url}/v1",
        api_key="unused",
        max_retries=0,
        default_headers={SESSION_HEADER: session} | (headers or {}),
    ) as client:
        messages: Any = [{"role": "user", "content": "make hello.txt"}]
        texts = []
        for _ in range(2):
            tool_calls: list[dict[str, Any]]
            if stream:
                text, calls = "", dict[int, dict[str, str]]()
                chunks = await client.chat.completions.create(
                    model="rollstream-tiny", messages=messages, tools=[TOOL_OPENAI], stream=True
                )
                async for chunk in chunks:
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        for call in choice.delta.tool_calls or []:
                            entry = calls.setdefault(call.index, {"id": "", "args": ""})
                            entry["id"] = call.id or entry["id"]
                            if call.function is not None:
                                entry["args"] += call.function.arguments or ""
                tool_calls = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": "bash", "arguments": c["args"]},
                    }
                    for c in calls.values()
                ]
            else:
                whole = await client.chat.completions.create(
                    model="rollstream-tiny", messages=messages, tools=[TOOL_OPENAI]
                )
                message = whole.choices[0].message
                text = message.content or ""
                tool_calls = [c.model_dump() for c in message.tool_calls or []]
            texts.append(text)
            assistant: dict[str, Any] = {"role": "assistant", "content": text}
            if tool_calls:
                assistant["tool_calls"] = tool_calls
            messages.append(assistant)
            for made in tool_calls:
                messages.append({"role": "tool", "tool_call_id": made["id"], "content": ""})
        return texts


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_second_turn_continues_the_sampled_tokens(
    start: Start,
    kafka_settings: KafkaSettings,
    tokenizer: ChatTokenizer,
    stream: bool,
) -> None:
    exact = await start(context="exact", tokenizer=default_tokenizer_dir())
    texts = await _chat_session(exact.url, "exact@solve", stream)
    assert texts == ["I will create it.\n", "Done."]  # the harness sees ordinary answers
    ordinary = await start()
    assert await _chat_session(ordinary.url, "plain@solve", stream) == texts

    records = await _records(kafka_settings, 4)
    first, second, plain_first, plain_second = records
    assert all(r.status is CallStatus.OK for r in records)
    assert first.context is not None and first.context.mode is ContextMode.ORDINARY
    assert first.context.note == FIRST_CALL
    assert second.context is not None and second.context.mode is ContextMode.EXACT
    assert not second.context.appended_end_of_turn  # the first turn ended on its stop token
    assert plain_first.context is None and plain_second.context is None
    assert second.finish_reason == "stop" and second.completion_logprobs is not None

    sampled = _context(first).to_list()
    assert second.prompt is not None
    contexts = {first.call_id: _context(first)}
    exact_prompt = resolve_prompt(second.prompt, contexts.get).to_list()
    assert exact_prompt[: len(sampled)] == sampled
    assert second.prompt.shared_len == len(sampled)  # delta-encoded as one extension
    # Ordinary mode: the server's re-rendered history is not what the model sampled.
    plain_sampled = _context(plain_first).to_list()
    plain_contexts = {plain_first.call_id: _context(plain_first)}
    assert plain_second.prompt is not None
    plain_prompt = resolve_prompt(plain_second.prompt, plain_contexts.get).to_list()
    assert plain_prompt[: len(plain_sampled)] != plain_sampled
    assert plain_second.prompt.shared_len < len(plain_sampled)
    # Both prompts end with the same new messages, rendered by the same template.
    tail = tokenizer.decode(plain_prompt, False)[-60:]
    assert tokenizer.decode(exact_prompt, False).endswith(tail)


async def test_anthropic_streams_in_exact_mode(start: Start, kafka_settings: KafkaSettings) -> None:
    interceptor = await start(context="exact", tokenizer=default_tokenizer_dir())
    async with anthropic.AsyncAnthropic(
        base_url=interceptor.url, api_key="claude@solve", max_retries=0
    ) as client:
        messages: Any = [{"role": "user", "content": "make hello.txt"}]
        first = await client.messages.create(
            model="rollstream-tiny", max_tokens=200, messages=messages, tools=[TOOL_ANTHROPIC]
        )
        use = [b for b in first.content if b.type == "tool_use"]
        assert len(use) == 1 and use[0].input["command"] == "echo polar > hello.txt"
        messages += [
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id}]},
        ]
        async with client.messages.stream(
            model="rollstream-tiny", max_tokens=200, messages=messages, tools=[TOOL_ANTHROPIC]
        ) as stream:
            final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["text"] and final.stop_reason == "end_turn"
    assert final.content[0].type == "text" and final.content[0].text == "Done."
    one, two = await _records(kafka_settings, 2)
    assert one.context is not None and one.context.mode is ContextMode.ORDINARY
    assert two.context is not None and two.context.mode is ContextMode.EXACT
    assert two.prompt is not None and two.prompt.base_call_id == one.call_id
    assert two.prompt.shared_len == len(_context(one))


async def test_a_session_chooses_its_mode_and_fallbacks_are_recorded(
    start: Start, kafka_settings: KafkaSettings
) -> None:
    # Deployment ordinary, with a tokenizer: a session asks for exact context per call.
    interceptor = await start(tokenizer=default_tokenizer_dir())
    await _chat_session(interceptor.url, "asks@solve", False, {CONTEXT_HEADER: "exact"})
    # Deployment exact without a tokenizer: every call falls back, and says why.
    bare = await start(context="exact")
    await _chat_session(bare.url, "bare@solve", False)
    # A session opting out of the deployment's exact context gets no context info.
    exact = await start(context="exact", tokenizer=default_tokenizer_dir())
    await _chat_session(exact.url, "out@solve", False, {CONTEXT_HEADER: "ordinary"})

    records = {(r.session_id, r.seq): r for r in await _records(kafka_settings, 6)}
    asks = records["asks@solve", 1].context
    assert asks is not None and asks.mode is ContextMode.EXACT
    for seq in (0, 1):
        bare_context = records["bare@solve", seq].context
        assert bare_context is not None and bare_context.mode is ContextMode.ORDINARY
        assert "no tokenizer" in bare_context.note
        assert records["out@solve", seq].context is None
    # The header is ours: the upstream request recorded does not carry it, nor its answer.
    assert CONTEXT_HEADER not in json.dumps(records["asks@solve", 1].model_dump(mode="json"))


async def test_a_session_registered_with_a_context_mode_gets_it(
    start: Start, kafka_settings: KafkaSettings
) -> None:
    interceptor = await start(tokenizer=default_tokenizer_dir())  # the default: ordinary
    async with aiohttp.ClientSession(base_url=interceptor.admin_url) as admin:
        async with admin.put("/sessions/chosen@solve", json={"context": "exact"}) as reply:
            assert reply.status == 200 and (await reply.json())["context"] == "exact"
        async with admin.put("/sessions/bad@solve", json={"context": "always"}) as reply:
            refused = await reply.json()
            # Refused, but the session registered in the default mode: never locked out.
            assert reply.status == 400 and "ordinary, exact" in refused["error"]
            assert refused["registered"] and refused["context"] == "ordinary"
            assert "bad@solve" in interceptor.addon.sessions
        await _chat_session(interceptor.url, "chosen@solve", True)
        async with admin.delete("/sessions/chosen@solve") as reply:
            assert reply.status == 200
        async with admin.put("/sessions/chosen@solve") as reply:  # forgotten with the session
            assert (await reply.json())["context"] == "ordinary"
    first, second = await _records(kafka_settings, 2)
    assert first.context is not None and first.context.note == FIRST_CALL
    assert second.context is not None and second.context.mode is ContextMode.EXACT


async def test_an_edited_history_falls_back(start: Start, kafka_settings: KafkaSettings) -> None:
    interceptor = await start(context="exact", tokenizer=default_tokenizer_dir())
    async with openai.AsyncOpenAI(
        base_url=f"{interceptor.url}/v1", api_key="edit@solve", max_retries=0
    ) as client:
        messages: Any = [{"role": "user", "content": "make hello.txt"}]
        await client.chat.completions.create(model="rollstream-tiny", messages=messages)
        # The harness compacted its history: the assistant turn it got is not echoed back.
        messages += [
            {"role": "assistant", "content": "(summary of earlier work)"},
            {"role": "user", "content": "go on"},
        ]
        await client.chat.completions.create(model="rollstream-tiny", messages=messages)
    _, second = await _records(kafka_settings, 2)
    assert second.context is not None and second.context.mode is ContextMode.ORDINARY
    assert second.context.note == NOT_APPENDED
