"""A whole answer replayed as a stream: the chunks, and what each API's translator makes of them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.adapters import ADAPTER_BY_KIND, ChatPassthrough
from rollstream.apis.anthropic import chat_to_anthropic, tool_input
from rollstream.apis.anthropic_stream import AnthropicStreamTranslator
from rollstream.apis.chat import Asked, Capture, strip_response
from rollstream.apis.errors import TranslationError
from rollstream.apis.responses_answer import chat_to_responses
from rollstream.apis.responses_stream import ResponsesStreamTranslator
from rollstream.apis.sse import DONE, SSEEvent, SSEParser
from rollstream.apis.synthesize import chunks_from_answer
from rollstream.schemas import ApiKind

JSON = dict[str, Any]
ANTHROPIC_REQUEST: JSON = {"model": "claude-x", "max_tokens": 64, "messages": [], "stream": True}
RESPONSES_REQUEST: JSON = {"model": "gpt-x", "input": "hi", "stream": True}
CAPTURE_FIELDS = ("token_ids", "prompt_token_ids")


def answer(
    content: str | None,
    calls: Sequence[tuple[str, str, str]] = (),
    reasoning: str | None = None,
    finish_reason: str = "stop",
    token_ids: tuple[int, ...] = (7, 8, 9),
) -> JSON:
    """A whole vLLM answer with the capture fields the interceptor asks for."""
    message: JSON = {"role": "assistant", "content": content, "tool_calls": []}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    message["tool_calls"] = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
    ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "served",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": {
                    "content": [{"token": f"token_id:{t}", "logprob": -0.5} for t in token_ids]
                },
                "finish_reason": finish_reason,
                "stop_reason": None,
                "token_ids": list(token_ids),
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(token_ids), "total_tokens": 6},
        "prompt_token_ids": [1, 2, 3],
    }


WHOLE = answer("I'll look.", [("call-a", "shell", '{"cmd": "ls"}')], finish_reason="tool_calls")


def test_the_chunks_of_an_answer() -> None:
    chunks = chunks_from_answer(WHOLE)
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-1" for c in chunks)
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "I'll look."},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "type": "function",
                    "function": {"name": "shell", "arguments": ""},
                    "id": "call-a",
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"cmd": "ls"}'}}]},
        {},
        None,  # the usage chunk
    ]
    # The capture fields sit where vLLM streams them: prompt ids first, the rest at the finish.
    assert chunks[0]["prompt_token_ids"] == [1, 2, 3]
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] == "tool_calls" and finish["token_ids"] == [7, 8, 9]
    assert finish["logprobs"] == WHOLE["choices"][0]["logprobs"]
    assert chunks[-1] == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "served",
        "choices": [],
        "usage": WHOLE["usage"],
    }
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])


def test_a_stream_capture_gathers_what_the_whole_answer_has() -> None:
    whole, streamed = Capture(), Capture()
    whole.add_response(WHOLE)
    for chunk in chunks_from_answer(WHOLE):
        streamed.add_chunk(chunk)
    assert streamed == whole


def test_arguments_sent_as_an_object_become_a_string() -> None:
    body = answer(None, finish_reason="tool_calls")
    body["choices"][0]["message"]["tool_calls"] = [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    ]
    [arguments] = [
        call["function"]["arguments"]
        for c in chunks_from_answer(body)
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls") or []
        if call["function"].get("arguments")
    ]
    assert json.loads(arguments) == {"a": 1}


@pytest.mark.parametrize("body", [{}, {"choices": []}, {"choices": ["x"]}, {"error": "boom"}])
def test_an_answer_without_choices_is_rejected(body: JSON) -> None:
    with pytest.raises(TranslationError, match="no choices"):
        chunks_from_answer(body)


def _chat_stream(whole: JSON, asked: Asked) -> list[JSON]:
    translator = ChatPassthrough(asked, "harness-model")
    events = [e for c in chunks_from_answer(whole) for e in translator.feed(c)]
    events += translator.finish()
    assert events[-1] == SSEEvent(DONE)
    return [e.data for e in events[:-1] if isinstance(e.data, dict)]


def test_capture_fields_the_harness_did_not_ask_for_are_stripped() -> None:
    chunks = _chat_stream(WHOLE, Asked())
    for chunk in chunks:
        assert chunk["model"] == "harness-model" and "usage" not in chunk
        assert not any(field in chunk for field in CAPTURE_FIELDS)
        for choice in chunk["choices"]:
            assert choice["logprobs"] is None
            assert not any(field in choice for field in CAPTURE_FIELDS)


def test_capture_fields_the_harness_asked_for_are_kept() -> None:
    chunks = _chat_stream(WHOLE, Asked(token_ids=True, logprobs=True, usage_in_stream=True))
    ids = [t for c in chunks for choice in c["choices"] for t in choice.get("token_ids") or []]
    assert ids == [7, 8, 9] and chunks[0]["prompt_token_ids"] == [1, 2, 3]
    assert chunks[-1]["usage"] == WHOLE["usage"]
    logprobs = [
        entry["logprob"]
        for c in chunks
        for choice in c["choices"]
        for entry in (choice["logprobs"] or {}).get("content") or []
    ]
    assert logprobs == [-0.5] * 3


def test_anthropic_counts_come_from_the_capture_fields() -> None:
    translator = AnthropicStreamTranslator(ANTHROPIC_REQUEST)
    events = [e for c in chunks_from_answer(WHOLE) for e in translator.feed(c)]
    events += translator.finish()
    data = [e.data for e in events if isinstance(e.data, dict)]
    assert data[0]["message"]["usage"]["input_tokens"] == 3
    [delta] = [d for d in data if d["type"] == "message_delta"]
    assert delta["usage"] == {"output_tokens": 3}
    assert delta["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize("kind", list(ADAPTER_BY_KIND))
def test_the_replayed_stream_is_well_formed_sse(kind: ApiKind) -> None:
    adapter = ADAPTER_BY_KIND[kind]
    request = {
        ApiKind.CHAT_COMPLETIONS: {"model": "m", "messages": [], "stream": True},
        ApiKind.ANTHROPIC_MESSAGES: ANTHROPIC_REQUEST,
        ApiKind.RESPONSES: RESPONSES_REQUEST,
        ApiKind.GEMINI: {"model": "gemini-2.5-pro", "contents": []},
    }[kind]
    translator = adapter.stream(request, Asked())
    events = [e for c in chunks_from_answer(WHOLE) for e in translator.feed(c)]
    events += translator.finish()
    assert SSEParser().feed(b"".join(e.encode() for e in events)) == events


# -- property: replayed stream and whole answer say the same ----------------------------------

_texts = st.one_of(st.none(), st.text(max_size=30))
_ids = st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12).map("call_".__add__)
_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
_arguments = st.one_of(
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)).map(json.dumps),
    st.text(max_size=12),  # a model may emit broken JSON: it must survive unchanged
)
_calls = st.lists(st.tuples(_ids, _names, _arguments), max_size=3, unique_by=lambda c: c[0])


@st.composite
def answers(draw: st.DrawFn) -> JSON:
    """Whole answers with text and/or reasoning and/or tool calls (ids, names, arguments)."""
    calls = draw(_calls)
    finish = draw(st.sampled_from(["stop", "length"])) if not calls else "tool_calls"
    token_ids = tuple(draw(st.lists(st.integers(0, 200_000), max_size=8)))
    return answer(draw(_texts), calls, draw(_texts), finish, token_ids)


def _chat_view(message: JSON) -> tuple[str, str, list[tuple[str, str, str]]]:
    calls = [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls") or []
    ]
    return message.get("content") or "", message.get("reasoning_content") or "", calls


@given(answers())
def test_property_chat_stream_says_what_the_whole_answer_says(whole: JSON) -> None:
    content, reasoning = "", ""
    calls: dict[int, list[str]] = {}
    finish = None
    for chunk in _chat_stream(whole, Asked()):
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            finish = choice["finish_reason"] or finish
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(call["index"], ["", "", ""])
                entry[0] += call.get("id") or ""
                entry[1] += call["function"].get("name") or ""
                entry[2] += call["function"].get("arguments") or ""
    stripped = strip_response(whole, Asked(), "harness-model")["choices"][0]
    streamed = (content, reasoning, [tuple(calls[k]) for k in sorted(calls)])
    assert streamed == _chat_view(stripped["message"])
    assert finish == stripped["finish_reason"]


def _anthropic_blocks(events: list[SSEEvent]) -> list[tuple[str, Any]]:
    blocks: list[list[Any]] = []
    for event in events:
        data = event.data
        assert isinstance(data, dict)
        if data["type"] == "content_block_start":
            block = data["content_block"]
            blocks.append([block["type"], block.get("id"), block.get("name"), ""])
        elif data["type"] == "content_block_delta":
            delta = data["delta"]
            piece = delta.get("text") or delta.get("thinking") or delta.get("partial_json") or ""
            blocks[data["index"]][3] += piece
    out: list[tuple[str, Any]] = []
    for kind, call_id, name, text in blocks:
        out.append((kind, (call_id, name, tool_input(text)) if kind == "tool_use" else text))
    return out


@given(answers())
def test_property_anthropic_stream_says_what_the_whole_answer_says(whole: JSON) -> None:
    translator = AnthropicStreamTranslator(ANTHROPIC_REQUEST)
    events = [e for c in chunks_from_answer(whole) for e in translator.feed(c)]
    events += translator.finish()
    message = chat_to_anthropic(whole, ANTHROPIC_REQUEST)
    expected: list[tuple[str, Any]] = []
    for block in message["content"]:
        if block["type"] == "tool_use":
            expected.append(("tool_use", (block["id"], block["name"], block["input"])))
        else:
            expected.append((block["type"], block.get("text", block.get("thinking"))))
    assert _anthropic_blocks(events) == expected
    [delta] = [e.data for e in events if isinstance(e.data, dict) and e.event == "message_delta"]
    assert delta["delta"]["stop_reason"] == message["stop_reason"]
    assert delta["usage"]["output_tokens"] == message["usage"]["output_tokens"]


@given(answers())
def test_property_responses_stream_says_what_the_whole_answer_says(whole: JSON) -> None:
    translator = ResponsesStreamTranslator(RESPONSES_REQUEST)
    events = [e for c in chunks_from_answer(whole) for e in translator.feed(c)]
    events += translator.finish()
    final = events[-1].data
    assert isinstance(final, dict)
    streamed = final["response"]
    response = chat_to_responses(whole, RESPONSES_REQUEST)
    assert streamed["status"] == response["status"]
    assert streamed["usage"] == response["usage"]

    def view(items: list[JSON]) -> list[JSON]:
        return [{k: v for k, v in item.items() if k != "id"} for item in items]

    assert view(streamed["output"]) == view(response["output"])
