"""A thinking model's reasoning through all four APIs, whole and streamed, in both context modes.

The reference backend serves Qwen3 with thinking on: each turn is sampled as ``<think>...</think>``
then the answer. Every API must hand the harness the reasoning in its own shape (Chat reasoning
fields, Responses reasoning items, Anthropic thinking blocks, Gemini thought parts), take it back
when the harness echoes the turn, and the trajectory must keep the sampled thinking tokens with
loss mask 1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer
from google import genai
from google.genai import types

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.families import load_family
from rollstream.models.family import Family
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import CallRecord, CallStatus, ContextMode, TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.harness_stack import register
from tests.interceptor.test_interceptor import SCENARIOS
from tests.kafka_reading import read_records

pytestmark = [
    pytest.mark.integration,
    # google-genai subclasses aiohttp's ClientSession, which aiohttp warns about: theirs, not ours.
    pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning"),
]
MODEL = "rollstream-tiny"
#: What the scripted policy thinks before its tool call (see its ``_reasoning``).
THOUGHT = "I will run echo polar > hello.txt."
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"command": {"type": "string"}}}


@pytest.fixture(scope="module")
def qwen3() -> Family:
    return load_family("qwen3")


Start = Callable[[Literal["ordinary", "exact"]], Awaitable[Interceptor]]


@pytest.fixture
async def start(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path, qwen3: Family
) -> AsyncIterator[Start]:
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    settings = BackendSettings(policy="scripted", scenarios=scenarios, model=MODEL)
    server = TestServer(Backend(settings, family=qwen3).app(), host="127.0.0.1")
    await server.start_server()
    started: list[Interceptor] = []

    async def create(context: Literal["ordinary", "exact"]) -> Interceptor:
        interceptor = Interceptor(
            InterceptorSettings(
                upstream=str(server.make_url("")).rstrip("/"),
                port=0,
                admin_port=0,
                upstream_model=MODEL,
                context=context,
                family="qwen3",
                tokenizer=qwen3.tokenizer.path,
            ),
            kafka_settings,
            PublisherSettings(),
            StatePaths(state_dir=tmp_path / "state"),
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


#: The final answer as vLLM's qwen3 parser hands it out: the text after </think>, newlines kept.
ANSWER = "\n\nDone."


async def _chat(url: str, session: str) -> None:
    tools: Any = [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}]
    messages: list[Any] = [{"role": "user", "content": "Create hello.txt."}]
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=session, max_retries=0) as client:
        first = await client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
        message = first.choices[0].message
        assert THOUGHT in (message.model_extra or {}).get("reasoning", "")
        assert message.tool_calls
        call = message.tool_calls[0]
        assert call.type == "function" and call.function.name == "bash"
        echoed = message.model_dump(exclude_none=True)
        messages += [echoed, {"role": "tool", "tool_call_id": call.id, "content": ""}]
        reasoning, text = "", ""
        stream = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=tools, stream=True
        )
        async for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta
                reasoning += (delta.model_extra or {}).get("reasoning") or ""
                text += delta.content or ""
    assert reasoning and text == ANSWER


async def _responses(url: str, session: str) -> None:
    tools: Any = [{"type": "function", "name": "exec_command", "parameters": SCHEMA}]
    items: list[Any] = [{"role": "user", "content": "Create hello.txt."}]
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=session, max_retries=0) as client:
        first = await client.responses.create(model=MODEL, input=items, tools=tools)
        kinds = [item.type for item in first.output]
        assert kinds[0] == "reasoning" and "function_call" in kinds
        summary = first.output[0].model_dump()["summary"]
        assert THOUGHT in summary[0]["text"]
        call = next(item for item in first.output if item.type == "function_call")
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": ""})
        final = None
        stream = await client.responses.create(model=MODEL, input=items, tools=tools, stream=True)
        async for event in stream:
            if event.type == "response.completed":
                final = event.response
    assert final is not None
    assert next(item.type for item in final.output) == "reasoning"
    assert final.output_text == ANSWER


async def _anthropic(url: str, session: str) -> None:
    tools: Any = [{"name": "Bash", "description": "Run", "input_schema": SCHEMA}]
    messages: list[Any] = [{"role": "user", "content": "Create hello.txt."}]
    client = anthropic.AsyncAnthropic(base_url=url, api_key=session, max_retries=0)
    first = await client.messages.create(
        model=MODEL, max_tokens=300, tools=tools, messages=messages
    )
    thinking = [b for b in first.content if b.type == "thinking"]
    assert thinking and THOUGHT in thinking[0].thinking
    use = next(b for b in first.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": ""}],
        },
    ]
    async with client.messages.stream(
        model=MODEL, max_tokens=300, tools=tools, messages=messages
    ) as stream:
        final = await stream.get_final_message()
    await client.close()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert [b.text for b in final.content if b.type == "text"] == [ANSWER]


async def _gemini(url: str, session: str) -> None:
    shell = types.Tool(
        function_declarations=[
            types.FunctionDeclaration(name="run_shell_command", parameters_json_schema=SCHEMA)
        ]
    )
    config = types.GenerateContentConfig(
        tools=[shell],
        thinking_config=types.ThinkingConfig(include_thoughts=True),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    client = genai.Client(api_key=session, http_options=types.HttpOptions(base_url=url))
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="Create hello.txt.")])]
    first = await client.aio.models.generate_content(model=MODEL, contents=contents, config=config)
    assert first.candidates and first.candidates[0].content and first.candidates[0].content.parts
    parts = first.candidates[0].content.parts
    assert parts[0].thought and THOUGHT in (parts[0].text or "")
    calls = first.function_calls or []
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
    thoughts, text = "", ""
    async for chunk in await client.aio.models.generate_content_stream(
        model=MODEL, contents=contents, config=config
    ):
        content = chunk.candidates[0].content if chunk.candidates else None
        for part in (content.parts if content else None) or []:
            if part.thought:
                thoughts += part.text or ""
            else:
                text += part.text or ""
    await client.aio.aclose()
    assert thoughts and text == ANSWER


CLIENTS = {"chat": _chat, "responses": _responses, "anthropic": _anthropic, "gemini": _gemini}


@pytest.mark.parametrize("context", ["ordinary", "exact"])
@pytest.mark.parametrize("api", list(CLIENTS))
async def test_reasoning_reaches_the_harness_and_trains(
    api: str,
    context: Literal["ordinary", "exact"],
    start: Start,
    kafka_settings: KafkaSettings,
    qwen3: Family,
) -> None:
    interceptor = await start(context)
    session = f"{api}-{context}-{id(interceptor)}@solve"
    register(interceptor, session)
    await CLIENTS[api](interceptor.url, session)
    records = sorted(
        await read_records(
            kafka_settings,
            TopicNames(kafka_settings.topic_prefix).events,
            CallRecord,
            2,
            where=lambda r: r.session_id == session,
            timeout=30,
        ),
        key=lambda r: r.seq,
    )
    assert [r.status for r in records] == [CallStatus.OK, CallStatus.OK]
    if context == "exact":  # the echoed turn, thinking included, was continued as tokens
        assert records[1].context is not None and records[1].context.mode is ContextMode.EXACT
    calls = resolve_calls(records)
    rebuilt = get_strategy("prefix_merge")(calls, StrategyContext(qwen3, 2))
    trained = [
        token
        for segment in rebuilt.segments
        for token, mask in zip(segment.input_ids.to_list(), segment.loss_mask.data, strict=True)
        if mask
    ]
    # The sampled thinking is trained on (mask 1), with the logprobs the server gave.
    assert THOUGHT in qwen3.tokenizer.decode(trained, skip_special_tokens=False)
