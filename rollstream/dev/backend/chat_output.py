"""A Chat answer as the served family's parsers split it: whole, or streamed chunk by chunk.

The sampled token ids go to the family's parser (``Family.parse``, or its stream parser fed one
id at a time), which splits them into content, reasoning and tool calls as vLLM's tool and
reasoning parsers do. Reasoning goes out as vLLM 0.32 writes it: under ``reasoning`` only (older
vLLM wrote ``reasoning_content``), its tokens counted in the usage. Text the parser could not
read as a tool call stays content.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from aiohttp import web

from rollstream.dev.backend import openai_api as api
from rollstream.dev.backend.engine import Outcome, Step
from rollstream.dev.backend.openai_api import ChatRequest
from rollstream.dev.backend.policies.base import GenerationFailed, GenerationRequest, Sample
from rollstream.models.family import Family, ParsedTurn, StreamDelta, StreamParser
from rollstream.models.template_family import TemplateFamily

JSON = dict[str, Any]
#: The reasoning field of an answer, as vLLM 0.32 names it.
REASONING_FIELDS = ("reasoning",)
#: The tags whose span vLLM's reasoning parsers count as reasoning tokens.
_THINK = ("<think>", "</think>")


def reasoning_tokens(family: Family, token_ids: list[int]) -> int | None:
    """Sampled tokens inside the reasoning tags, as vLLM counts them; None without reasoning.

    vLLM reports ``completion_tokens_details.reasoning_tokens`` when it runs a reasoning parser
    (here: a family that thinks), counting the tokens between the tags, nested or not.
    """
    if not family.thinks:
        return None
    start, end = (family.tokenizer.special_id(tag) for tag in _THINK)
    count = depth = 0
    for token in token_ids:
        if token == start:
            depth += 1
        elif token == end:
            depth = max(0, depth - 1)
        elif depth:
            count += 1
    return count


def parses(family: Family, req: ChatRequest) -> bool:
    """Whether the answer goes through the family's parser.

    The generic family parses only when tools are offered, as the backend always has; a
    renderer family always does, for its reasoning (vLLM with a reasoning parser).
    """
    return req.parse_tools or not isinstance(family, TemplateFamily)


def _kept_ids(family: Family, outcome: Outcome) -> list[int]:
    """The sampled ids whose text the answer keeps: all, or those before a stop string."""
    ids = outcome.token_ids
    if outcome.stop_reason is None:
        return ids
    # A stop string cut the text (vLLM parses the cut text): the tokens entirely before it.
    kept = len(ids)
    while kept and len(family.tokenizer.decode(ids[:kept])) > len(outcome.text):
        kept -= 1
    return ids[:kept]


def parse_outcome(
    family: Family, req: ChatRequest, prompt_ids: list[int], outcome: Outcome
) -> ParsedTurn:
    """The whole answer, parsed."""
    tools = req.tools if req.parse_tools else None
    return family.parse(_kept_ids(family, outcome), prompt_ids, tools)


def chat_message(
    family: Family, req: ChatRequest, prompt_ids: list[int], outcome: Outcome
) -> tuple[JSON, str | None]:
    """The ``message`` of a whole answer and its finish reason."""
    finish = outcome.finish_reason
    if not parses(family, req):
        return {"role": "assistant", "content": outcome.text, "tool_calls": []}, finish
    parsed = parse_outcome(family, req, prompt_ids, outcome)
    # Calls only where tools were offered: with tool_choice none, vLLM runs no tool parser.
    calls = parsed.tool_calls if req.parse_tools else []
    content = parsed.content
    if content is None and not calls and not parsed.reasoning:
        content = ""  # an empty answer is empty text, as the unparsed one is
    message: JSON = {
        "role": "assistant",
        "content": content,
        "tool_calls": [call.to_openai() for call in calls],
    }
    if parsed.reasoning:
        for name in REASONING_FIELDS:
            message[name] = parsed.reasoning
    if calls and finish == "stop":
        finish = "tool_calls"
    return message, finish


def _add(delta: JSON, part: StreamDelta, with_calls: bool) -> None:
    """Merge one parser step into a chunk's delta."""
    if part.reasoning:
        for name in REASONING_FIELDS:
            delta[name] = delta.get(name, "") + part.reasoning
    if part.content:
        delta["content"] = delta.get("content", "") + part.content
    if part.tool_calls and with_calls:
        delta["tool_calls"] = [*delta.get("tool_calls", []), *part.tool_calls]


async def sse_response(request: web.Request) -> web.StreamResponse:
    """An open server-sent-events response."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, chunk: JSON) -> None:
    """One ``data:`` event, compact as vLLM writes it (pydantic's JSON: orjson's spelling)."""
    await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")


async def end_failed_stream(
    response: web.StreamResponse, exc: GenerationFailed
) -> web.StreamResponse:
    """End a stream its engine failed in, as vLLM does: an error event, then ``[DONE]``."""
    error = {"message": str(exc), "type": "InternalServerError", "param": None, "code": 500}
    await response.write(b"data: " + orjson.dumps({"error": error}) + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def stream_chat(
    request: web.Request,
    header: api.Header,
    family: Family,
    req: ChatRequest,
    gen_request: GenerationRequest,
    steps: AsyncIterator[Step],
    outcome: Outcome,
    logprob: Callable[[Sample], JSON],
) -> web.StreamResponse:
    """Stream a Chat answer: one chunk per sampled token, its ids and logprobs beside it.

    The parser's last step (the tool calls) goes out with the last sampled token, so every
    delta rides on a token chunk when the model stopped by itself; after a length cut it goes
    in the closing chunk.
    """
    response = await sse_response(request)
    with_ids = req.return_token_ids
    parser = family.stream_parser(gen_request.prompt_ids, req.tools if req.parse_tools else None)
    parsing = parses(family, req)
    await send(
        response,
        api.chat_chunk(
            header,
            delta={"role": "assistant", "content": ""},
            token_ids=[] if with_ids else None,
            prompt_ids=gen_request.prompt_ids if with_ids else None,
        ),
    )
    try:
        finished = await _stream_steps(
            response, header, req, steps, outcome, logprob, parser, parsing
        )
    except GenerationFailed as exc:
        return await end_failed_stream(response, exc)
    final: JSON = {}
    if parsing and not finished:
        _add(final, parser.finish(), req.parse_tools)
    finish = outcome.finish_reason
    called = parsing and req.parse_tools and parser.final is not None and parser.final.tool_calls
    if called and finish == "stop":
        finish = "tool_calls"
    await send(
        response,
        api.chat_chunk(
            header,
            delta=final,
            token_ids=[] if with_ids else None,
            finish_reason=finish,
            stop_reason=outcome.stop_reason,
        ),
    )
    if req.include_usage:
        await send(
            response,
            api.usage_chunk(
                header,
                "chat.completion.chunk",
                len(gen_request.prompt_ids),
                len(outcome.token_ids),
                reasoning_tokens(family, outcome.token_ids),
            ),
        )
    await response.write(b"data: [DONE]\n\n")
    return response


async def _stream_steps(
    response: web.StreamResponse,
    header: api.Header,
    req: ChatRequest,
    steps: AsyncIterator[Step],
    outcome: Outcome,
    logprob: Callable[[Sample], JSON],
    parser: StreamParser,
    parsing: bool,
) -> bool:
    """One chunk per sampled token; True when the parser's last step went out with one."""
    with_ids = req.return_token_ids
    finished = False
    async for step in steps:
        delta: JSON = {}
        sample = step.sample
        if not parsing:
            if step.text:
                delta["content"] = step.text
        else:
            if sample is not None:
                _add(delta, parser.feed([sample.token_id]), req.parse_tools)
            if outcome.finish_reason is not None:  # the engine's last step
                _add(delta, parser.finish(), req.parse_tools)
                finished = True
        await send(
            response,
            api.chat_chunk(
                header,
                delta=delta,
                token_ids=([sample.token_id] if sample else []) if with_ids else None,
                logprobs=[logprob(sample)] if req.logprobs and sample else None,
            ),
        )
    return finished
