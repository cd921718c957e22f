"""A streamed Chat Completions answer as Anthropic Messages events."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.anthropic_stream import AnthropicStreamTranslator
from rollstream.apis.sse import SSEEvent, SSEParser
from tests.apis.strategies import json_values_of, names, split
from tests.apis.vllm_chunks import CAPTURE_FIELDS, call_delta, chunk, usage_chunk

JSON = dict[str, Any]
REQUEST: JSON = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 512,
    "stream": True,
    "stop_sequences": ["END"],
    "messages": [{"role": "user", "content": "read a.py and grep ü"}],
}


def run(chunks: list[JSON], request: JSON = REQUEST) -> list[SSEEvent]:
    translator = AnthropicStreamTranslator(request)
    events = [e for c in chunks for e in translator.feed(c)]
    return events + translator.finish()


def payloads(events: list[SSEEvent]) -> list[JSON]:
    out = []
    for event in events:
        assert isinstance(event.data, dict)
        assert event.event == event.data["type"]
        out.append(event.data)
    return out


def accumulate(events: list[SSEEvent]) -> JSON:
    """The message a client rebuilds from the events, checking the protocol on the way."""
    data = payloads(events)
    assert [d["type"] for d in data[:2]] == ["message_start", "ping"]
    assert [d["type"] for d in data[-2:]] == ["message_delta", "message_stop"]
    message = dict(data[0]["message"], content=[])
    pieces: list[str] = []
    open_index = None
    for d in data[2:-2]:
        if d["type"] == "content_block_start":
            assert open_index is None
            assert d["index"] == len(message["content"])
            open_index = d["index"]
            message["content"].append(dict(d["content_block"]))
            pieces.append("")
        elif d["type"] == "content_block_delta":
            assert d["index"] == open_index
            delta = d["delta"]
            field = {"text_delta": "text", "thinking_delta": "thinking"}.get(delta["type"])
            if field is not None:
                message["content"][open_index][field] += delta[field]
            else:
                assert delta["type"] == "input_json_delta"
                pieces[open_index] += delta["partial_json"]
        else:
            assert d == {"type": "content_block_stop", "index": open_index}
            open_index = None
    assert open_index is None
    for block, piece in zip(message["content"], pieces, strict=True):
        if block["type"] == "tool_use":
            block["input"] = json.loads(piece) if piece else {}
    message.update(data[-2]["delta"], usage=message["usage"] | data[-2]["usage"])
    return message


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


def test_text_then_parallel_tool_calls_exact_events() -> None:
    assert payloads(run(REALISTIC)) == [
        {
            "type": "message_start",
            "message": {
                "id": "msg_chatcmpl-s1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 30,
                    "output_tokens": 0,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            },
        },
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Let me "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "check."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "chatcmpl-tool-a",
                "name": "read",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": '},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '"a.py"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "tool_use",
                "id": "chatcmpl-tool-b",
                "name": "grep",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"pattern": "'},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": 'ü", "flags": '},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '["-n"]}'},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    ]


def test_realistic_stream_reassembles() -> None:
    message = accumulate(run(REALISTIC))
    assert message["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "chatcmpl-tool-a", "name": "read", "input": json.loads(ARGS_A)},
        {"type": "tool_use", "id": "chatcmpl-tool-b", "name": "grep", "input": json.loads(ARGS_B)},
    ]
    assert message["stop_reason"] == "tool_use"


def test_capture_fields_never_emitted() -> None:
    wire = b"".join(e.encode() for e in run(REALISTIC)).decode()
    for field in CAPTURE_FIELDS:
        assert field not in wire
    assert "-0.5" not in wire


def test_events_survive_the_wire() -> None:
    events = run(REALISTIC)
    assert SSEParser().feed(b"".join(e.encode() for e in events)) == events


def test_thinking_then_text() -> None:
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "Hmm, "}, [1]),
        chunk({"reasoning_content": "easy."}, [2]),
        chunk({"reasoning": " Still."}, [3]),  # newer vLLM names the field "reasoning"
        chunk({"content": "42"}, [4], "stop"),
    ]
    events = payloads(run(chunks))
    assert events[2:9] == [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Hmm, "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "easy."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": " Still."},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "42"}},
    ]
    message = accumulate(run(chunks))
    assert [b["type"] for b in message["content"]] == ["thinking", "text"]
    assert message["content"][0]["thinking"] == "Hmm, easy. Still."


def test_stop_sequence_and_token_id_count_without_usage_chunk() -> None:
    chunks = [chunk({"content": "done"}, [1, 2]), chunk({}, [3], "stop", "END")]
    assert payloads(run(chunks))[-2:] == [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]


def test_length_and_no_token_ids() -> None:
    plain = {"id": "x", "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}
    last = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    events = payloads(run([plain, last]))
    assert events[0]["message"]["usage"]["input_tokens"] == 0
    assert events[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[-2]["usage"] == {"output_tokens": 0}


def test_other_choices_ignored() -> None:
    other = chunk({"content": "from choice 1"}, [9])
    other["choices"][0]["index"] = 1
    message = accumulate(run([chunk({"content": "mine"}, [1]), other, chunk({}, [], "stop")]))
    assert message["content"] == [{"type": "text", "text": "mine"}]


def test_finish_twice_and_feed_after_finish() -> None:
    translator = AnthropicStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "hi"}, [1]))
    first = translator.finish()
    assert [e.event for e in first] == ["content_block_stop", "message_delta", "message_stop"]
    assert translator.finish() == []
    assert translator.feed(chunk({"content": "late"}, [2])) == []


def test_finish_without_chunks_is_a_complete_empty_message() -> None:
    message = accumulate(AnthropicStreamTranslator(REQUEST).finish())
    assert message["content"] == []
    assert message["id"].startswith("msg_")
    assert message["stop_reason"] == "end_turn"


def test_error_event() -> None:
    translator = AnthropicStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "partial"}, [1]))
    events = translator.error(502, "upstream connection reset")
    assert events == [
        SSEEvent(
            {
                "type": "error",
                "error": {"type": "api_error", "message": "upstream connection reset"},
            },
            "error",
        )
    ]
    assert events[0].encode().startswith(b"event: error\ndata: ")
    assert translator.finish() == []


def test_upstream_error_chunk_becomes_error_event() -> None:
    translator = AnthropicStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "partial"}, [1]))
    events = translator.feed({"error": {"message": "overloaded", "type": "x", "code": 503}})
    assert payloads(events) == [
        {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}
    ]


# --- property: any chunking of an answer rebuilds it ------------------------------------

texts = st.text(max_size=40)
ids = st.text(min_size=1, max_size=24)
json_values = json_values_of(texts)
answers = st.tuples(
    texts,
    st.lists(st.tuples(ids, names, st.dictionaries(texts, json_values, max_size=4)), max_size=3),
)


@given(answers, st.data())
def test_property_any_chunking_rebuilds_the_answer(answer: Any, data: st.DataObject) -> None:
    content, calls = answer
    chunks = [chunk({"role": "assistant", "content": ""}, [], prompt_token_ids=[1, 2])]
    chunks += [chunk({"content": piece}, [7]) for piece in split(data, content)]
    for k, (call_id, name, arguments) in enumerate(calls):
        fragments = split(data, json.dumps(arguments, ensure_ascii=False))
        chunks.append(chunk(call_delta(k, fragments[0], call_id, name), [8]))
        chunks += [chunk(call_delta(k, f), [9]) for f in fragments[1:]]
    chunks.append(chunk({}, [], "tool_calls" if calls else "stop"))
    message = accumulate(run(chunks))
    expected: list[JSON] = [{"type": "text", "text": content}] if content else []
    expected += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    assert message["content"] == expected
    assert message["stop_reason"] == ("tool_use" if calls else "end_turn")
    assert message["usage"]["output_tokens"] == len(chunks) - 2
