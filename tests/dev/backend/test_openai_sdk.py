"""The official OpenAI Python SDK against the backend: streaming and not, with tools."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from rollstream.models.tokenizer import ChatTokenizer
from tests.dev.backend.conftest import SHELL_TOOL, BackendFactory

TOOLS: Any = [SHELL_TOOL]

MESSAGES: Any = [{"role": "user", "content": "Create hello.txt containing polar."}]


@pytest.fixture
async def sdk(
    backend_factory: BackendFactory, scenario_file: Path
) -> AsyncIterator[openai.AsyncOpenAI]:
    """The SDK pointed at a scripted backend, the session key naming the scenario."""
    client = await backend_factory(policy="scripted", scenarios=scenario_file)
    async with openai.AsyncOpenAI(
        base_url=str(client.make_url("/v1")), api_key="sess-9@solve", max_retries=0
    ) as sdk:
        yield sdk


async def test_sdk_non_streaming_with_tools(
    sdk: openai.AsyncOpenAI, tokenizer: ChatTokenizer
) -> None:
    response = await sdk.chat.completions.create(
        model="rollstream-tiny",
        messages=MESSAGES,
        tools=TOOLS,
        extra_body={"return_token_ids": True},
        logprobs=True,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "bash"
    assert json.loads(call.function.arguments) == {"command": "echo polar > hello.txt"}
    assert response.model_extra is not None and choice.model_extra is not None
    prompt_ids = response.model_extra["prompt_token_ids"]
    token_ids = choice.model_extra["token_ids"]
    assert prompt_ids == tokenizer.encode(tokenizer.render(MESSAGES, [SHELL_TOOL]))
    assert "<tool_call>" in tokenizer.decode(token_ids)
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert len(choice.logprobs.content) == len(token_ids)


async def test_sdk_streaming_with_tools(sdk: openai.AsyncOpenAI, tokenizer: ChatTokenizer) -> None:
    stream = await sdk.chat.completions.create(
        model="rollstream-tiny",
        messages=MESSAGES,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_token_ids": True},
    )
    prompt_ids: list[int] = []
    token_ids: list[int] = []
    content, arguments, names, finish = "", "", "", None
    usage = None
    async for chunk in stream:
        extra = chunk.model_extra or {}
        prompt_ids += extra.get("prompt_token_ids") or []
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            token_ids += (choice.model_extra or {}).get("token_ids") or []
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                if call.function is not None:
                    names += call.function.name or ""
                    arguments += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert content == "Let me look.\n"
    assert names == "bash"
    assert json.loads(arguments) == {"command": "echo polar > hello.txt"}
    assert finish == "tool_calls"
    assert prompt_ids == tokenizer.encode(tokenizer.render(MESSAGES, [SHELL_TOOL]))
    assert usage is not None and usage.completion_tokens == len(token_ids)


async def test_sdk_sees_openai_errors(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.chat.completions.create(model="gpt-9", messages=MESSAGES)
    assert "does not exist" in str(info.value)
    with pytest.raises(openai.BadRequestError, match="cannot be greater than max_model_len"):
        await sdk.chat.completions.create(
            model="rollstream-tiny",
            messages=MESSAGES,
            max_tokens=10**6,
        )
