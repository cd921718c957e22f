"""A streamed Chat Completions answer as Gemini streamGenerateContent events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.apis.chat import Asked
from rollstream.apis.errors import TranslationError
from rollstream.apis.gemini_answer import chat_to_gemini
from rollstream.apis.gemini_stream import GeminiStreamTranslator
from rollstream.apis.sse import SSEEvent, SSEParser
from rollstream.apis.synthesize import chunks_from_answer
from rollstream.schemas import ApiKind
from tests.apis.strategies import json_values_of, names, split
from tests.apis.vllm_chunks import (
    CAPTURE_FIELDS,
    UPSTREAM,
    call_delta,
    chunk,
    usage_chunk,
)

JSON = dict[str, Any]
REQUEST: JSON = {
    "model": "gemini-2.5-pro",
    "contents": [{"role": "user", "parts": [{"text": "read a.py and grep ü"}]}],
    # As Gemini CLI asks; without it thoughts are left out (test_thoughts_only_when_asked).
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
}


def run(chunks: list[JSON], request: JSON = REQUEST) -> list[SSEEvent]:
    translator = ADAPTER_BY_KIND[ApiKind.GEMINI].stream(request, Asked())
    assert isinstance(translator, GeminiStreamTranslator)
    events = [e for c in chunks for e in translator.feed(c)]
    return events + translator.finish()


def payloads(events: list[SSEEvent]) -> list[JSON]:
    out = []
    for event in events:
        assert event.event is None and isinstance(event.data, dict)  # Gemini names no events
        out.append(event.data)
    return out


def accumulate(events: list[SSEEvent]) -> tuple[list[JSON], JSON]:
    """The model turn a client rebuilds (text merged, as Gemini CLI does), and the last event.

    Checks the protocol on the way: one candidate, one response id, the finish and the usage
    in the last event only, every functionCall part whole.
    """
    data = payloads(events)
    parts: list[JSON] = []
    for i, d in enumerate(data):
        last = i == len(data) - 1
        [candidate] = d["candidates"]
        assert candidate["index"] == 0 and candidate["content"]["role"] == "model"
        assert ("finishReason" in candidate) == last and ("usageMetadata" in d) == last
        assert d["responseId"] == data[0]["responseId"] and d["modelVersion"] == "gemini-2.5-pro"
        for part in candidate["content"]["parts"]:
            if "functionCall" in part:
                assert isinstance(part["functionCall"]["args"], dict)
                parts.append(part)
            elif parts and "text" in parts[-1] and parts[-1].get("thought") == part.get("thought"):
                parts[-1] = dict(parts[-1], text=parts[-1]["text"] + part["text"])
            else:
                parts.append(dict(part))
    return parts, data[-1]


ARGS_A = '{"path": "a.py"}'
ARGS_B = '{"pattern": "ü", "flags": ["-n"]}'
REALISTIC = [
    chunk({"role": "assistant", "content": ""}, [], prompt_token_ids=list(range(30))),
    chunk({"content": "Let me "}, [101, 102]),
    chunk({"content": "check."}, [103]),
    chunk(call_delta(0, "", "chatcmpl-tool-a", "read"), [104, 105]),
    chunk(call_delta(0, '{"path": '), [106]),
    chunk(call_delta(0, '"a.py"}'), [107]),
    chunk(call_delta(1, '{"pattern": "', "chatcmpl-tool-b", "grep"), [108, 109]),
    chunk(call_delta(1, 'ü", "flags": '), [110]),
    chunk(call_delta(1, '["-n"]}'), [111]),
    chunk({}, [112], "tool_calls"),
    usage_chunk(30, 12),
]


def test_text_then_parallel_calls_exact_events() -> None:
    head = {"modelVersion": "gemini-2.5-pro", "responseId": "chatcmpl-s1"}

    def event(parts: list[JSON], **extra: Any) -> JSON:
        candidate: JSON = {"content": {"role": "model", "parts": parts}}
        if "finishReason" in extra:
            candidate["finishReason"] = extra.pop("finishReason")
        return {"candidates": [candidate | {"index": 0}], **extra, **head}

    read = {"functionCall": {"id": "chatcmpl-tool-a", "name": "read", "args": {"path": "a.py"}}}
    grep = {
        "functionCall": {
            "id": "chatcmpl-tool-b",
            "name": "grep",
            "args": {"pattern": "ü", "flags": ["-n"]},
        }
    }
    assert payloads(run(REALISTIC)) == [
        event([{"text": "Let me "}]),
        event([{"text": "check."}]),
        event([read]),  # whole, once the next call began
        event(
            [grep],
            finishReason="STOP",
            usageMetadata={
                "promptTokenCount": 30,
                "candidatesTokenCount": 12,
                "totalTokenCount": 42,
            },
        ),
    ]


def test_capture_fields_never_emitted_and_events_survive_the_wire() -> None:
    events = run(REALISTIC)
    wire = b"".join(e.encode() for e in events)
    assert not any(field.encode() in wire for field in CAPTURE_FIELDS)
    assert b"event:" not in wire and b"[DONE]" not in wire
    assert SSEParser().feed(wire) == events


def test_thoughts_come_as_thought_parts() -> None:
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "Hmm, "}, [1]),
        chunk({"reasoning_content": "a.py."}, [2]),
        chunk({"reasoning": None, "content": "Done"}, [3], "stop"),
    ]
    parts, last = accumulate(run(chunks))
    assert parts == [{"text": "Hmm, a.py.", "thought": True}, {"text": "Done"}]
    assert last["candidates"][0]["finishReason"] == "STOP"


def test_thoughts_only_when_asked() -> None:
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "Hmm."}, [1]),
        chunk({"content": "Done"}, [2], "stop"),
    ]
    for config in ({}, {"generationConfig": {"thinkingConfig": {"includeThoughts": False}}}):
        request = {"model": "gemini-2.5-pro", "contents": []} | config
        parts, _ = accumulate(run(chunks, request))
        assert parts == [{"text": "Done"}]


def test_length_and_counts_from_capture_fields_without_usage() -> None:
    chunks = [
        chunk({"content": "abc"}, [1, 2], prompt_token_ids=[5, 6, 7]),
        chunk({"content": "d"}, [3], "length"),
    ]
    _, last = accumulate(run(chunks))
    assert last["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert last["usageMetadata"] == {
        "promptTokenCount": 3,
        "candidatesTokenCount": 3,
        "totalTokenCount": 6,
    }


def test_other_choices_ignored() -> None:
    other = chunk({"content": "other"}, [9])
    other["choices"][0]["index"] = 1
    parts, _ = accumulate(run([chunk({"content": "mine"}, [1]), other, chunk({}, [], "stop")]))
    assert parts == [{"text": "mine"}]


def test_finish_twice_and_feed_after_finish() -> None:
    translator = GeminiStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "x"}, [1], "stop"))
    assert len(translator.finish()) == 1
    assert translator.finish() == []
    assert translator.feed(chunk({"content": "y"}, [2])) == []
    assert translator.error(500, "late") == []


def test_finish_without_chunks_is_a_complete_empty_answer() -> None:
    [event] = GeminiStreamTranslator(REQUEST).finish()
    assert isinstance(event.data, dict)
    assert event.data["candidates"] == [
        {"content": {"role": "model", "parts": []}, "finishReason": "STOP", "index": 0}
    ]
    assert event.data["usageMetadata"]["totalTokenCount"] == 0
    assert event.data["responseId"]


def test_error_event_ends_the_stream() -> None:
    translator = GeminiStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "x"}, [1]))
    assert [e.data for e in translator.error(502, "upstream stream ended early")] == [
        {"error": {"code": 502, "message": "upstream stream ended early", "status": "UNAVAILABLE"}}
    ]
    assert translator.finish() == []


def test_upstream_error_chunk_becomes_an_error_event() -> None:
    translator = GeminiStreamTranslator(REQUEST)
    [event] = translator.feed({"error": {"message": "overloaded", "code": 503}})
    assert event.data == {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}


def test_a_call_resumed_after_the_next_began_is_refused() -> None:
    translator = GeminiStreamTranslator(REQUEST)
    translator.feed(chunk(call_delta(0, "{}", "a", "f"), [1]))
    translator.feed(chunk(call_delta(1, "{}", "b", "g"), [2]))
    with pytest.raises(TranslationError, match="resumed"):
        translator.feed(chunk(call_delta(0, "x"), [3]))


def test_model_version_falls_back_to_the_upstream_model() -> None:
    data = payloads(run([chunk({"content": "x"}, [1], "stop")], {"contents": []}))
    assert {d["modelVersion"] for d in data} == {UPSTREAM}


# --- properties ---------------------------------------------------------------------------

texts = st.text(max_size=40)
ids = st.text(min_size=1, max_size=24)
json_values = json_values_of(texts)
answers = st.tuples(
    texts,
    texts,
    st.lists(st.tuples(ids, names, st.dictionaries(texts, json_values, max_size=4)), max_size=3),
)


@given(answers, st.data())
def test_property_any_chunking_rebuilds_the_answer(answer: Any, data: st.DataObject) -> None:
    reasoning, content, calls = answer
    chunks = [chunk({"role": "assistant", "content": ""}, [], prompt_token_ids=[1, 2])]
    chunks += [chunk({"reasoning_content": piece}, [6]) for piece in split(data, reasoning)]
    chunks += [chunk({"content": piece}, [7]) for piece in split(data, content)]
    for k, (call_id, name, arguments) in enumerate(calls):
        fragments = split(data, json.dumps(arguments, ensure_ascii=False))
        chunks.append(chunk(call_delta(k, fragments[0], call_id, name), [8]))
        chunks += [chunk(call_delta(k, f), [9]) for f in fragments[1:]]
    chunks.append(chunk({}, [], "tool_calls" if calls else "stop"))
    parts, last = accumulate(run(chunks))
    expected: list[JSON] = [{"text": reasoning, "thought": True}] if reasoning else []
    expected += [{"text": content}] if content else []
    expected += [{"functionCall": {"id": i, "name": n, "args": a}} for i, n, a in calls]
    assert parts == expected
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"]["candidatesTokenCount"] == len(chunks) - 2


@given(answers)
def test_property_a_replayed_stream_says_what_the_whole_answer_says(answer: Any) -> None:
    reasoning, content, calls = answer
    message: JSON = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    message["tool_calls"] = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, n, a in calls
    ]
    whole = {
        "id": "chatcmpl-1",
        "model": UPSTREAM,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "token_ids": [1]}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
    parts, last = accumulate(run(chunks_from_answer(whole)))
    answered = chat_to_gemini(whole, REQUEST)
    assert parts == answered["candidates"][0]["content"]["parts"]
    assert last["usageMetadata"] == answered["usageMetadata"]
    assert last["candidates"][0]["finishReason"] == answered["candidates"][0]["finishReason"]
