"""Streamed Chat Completions chunks as Responses API events."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx2  # the openai SDK's HTTP client; its MockTransport feeds the SDK our bytes
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.errors import TranslationError
from rollstream.apis.responses_answer import chat_to_responses
from rollstream.apis.responses_stream import ResponsesStreamTranslator
from rollstream.apis.sse import SSEEvent, SSEParser

JSON = dict[str, Any]
REQUEST: JSON = {
    "model": "gpt-5-codex",
    "input": "list and read",
    "stream": True,
    "tools": [{"type": "function", "name": "shell"}, {"type": "function", "name": "read"}],
}
USAGE = {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}


def chunk(delta: JSON | None = None, finish_reason: str | None = None, **extra: Any) -> JSON:
    """A vLLM chunk with the capture fields the proxy asked for."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "Qwen/Qwen3-8B",
        "choices": [
            {
                "index": 0,
                "delta": delta or {},
                "logprobs": {"content": [{"token": "x", "logprob": -0.5}]},
                "finish_reason": finish_reason,
                "token_ids": [7, 8],
            }
        ],
        **extra,
    }


def usage_chunk() -> JSON:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": USAGE}


def tool_delta(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> JSON:
    entry: JSON = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        entry.update(id=call_id, type="function")
        entry["function"]["name"] = name
    return {"tool_calls": [entry]}


TOOL_CALL_CHUNKS = [
    chunk({"role": "assistant", "content": ""}, prompt_token_ids=[1, 2, 3]),
    chunk({"content": "I'll "}),
    chunk({"content": "look."}),
    chunk(tool_delta(0, "", "chatcmpl-tool-a", "shell")),
    chunk(tool_delta(0, '{"cmd": ')),
    chunk(tool_delta(0, '["ls"]}')),
    chunk(tool_delta(1, '{"path"', "chatcmpl-tool-b", "read")),
    chunk(tool_delta(1, ': "a.txt"}')),
    chunk({}, "tool_calls"),
    usage_chunk(),
]


def run(chunks: list[JSON], request: JSON = REQUEST) -> list[SSEEvent]:
    translator = ResponsesStreamTranslator(request)
    events = [e for c in chunks for e in translator.feed(c)]
    return events + translator.finish()


def data(event: SSEEvent) -> JSON:
    assert isinstance(event.data, dict)
    return event.data


def test_text_then_parallel_tool_calls() -> None:
    events = run(TOOL_CALL_CHUNKS)
    types = [e.event for e in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    payloads = [data(e) for e in events]
    assert [p["type"] for p in payloads] == types
    assert [p["sequence_number"] for p in payloads] == list(range(len(events)))

    created = payloads[0]["response"]
    assert created["status"] == "in_progress"
    assert (created["output"], created["usage"], created["model"]) == ([], None, "gpt-5-codex")
    assert payloads[1]["response"] == created
    response_id = created["id"]

    msg_id = payloads[2]["item"]["id"]
    assert payloads[2] == {
        "type": "response.output_item.added",
        "sequence_number": 2,
        "output_index": 0,
        "item": {
            "type": "message",
            "id": msg_id,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        },
    }
    where = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    assert payloads[3] == {
        "type": "response.content_part.added",
        "sequence_number": 3,
        **where,
        "part": {"type": "output_text", "text": "", "annotations": []},
    }
    assert payloads[4] == {
        "type": "response.output_text.delta",
        "sequence_number": 4,
        **where,
        "delta": "I'll ",
    }
    assert payloads[5]["delta"] == "look."
    assert payloads[6] == {
        "type": "response.output_text.done",
        "sequence_number": 6,
        **where,
        "text": "I'll look.",
    }
    part = {"type": "output_text", "text": "I'll look.", "annotations": []}
    assert payloads[7] == {
        "type": "response.content_part.done",
        "sequence_number": 7,
        **where,
        "part": part,
    }
    message = {
        "type": "message",
        "id": msg_id,
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }
    assert payloads[8] == {
        "type": "response.output_item.done",
        "sequence_number": 8,
        "output_index": 0,
        "item": message,
    }

    calls = []
    for start, (index, call_id, name, pieces) in zip(
        (9, 14),
        [
            (1, "chatcmpl-tool-a", "shell", ['{"cmd": ', '["ls"]}']),
            (2, "chatcmpl-tool-b", "read", ['{"path"', ': "a.txt"}']),
        ],
        strict=True,
    ):
        fc_id = payloads[start]["item"]["id"]
        assert fc_id.startswith("fc_")
        item = {"type": "function_call", "id": fc_id, "call_id": call_id, "name": name}
        assert payloads[start]["output_index"] == index
        assert payloads[start]["item"] == {**item, "arguments": "", "status": "in_progress"}
        deltas = payloads[start + 1 : start + 3]
        assert all(d["item_id"] == fc_id and d["output_index"] == index for d in deltas)
        assert [d["delta"] for d in deltas] == pieces
        arguments = "".join(pieces)
        assert payloads[start + 3] == {
            "type": "response.function_call_arguments.done",
            "sequence_number": start + 3,
            "item_id": fc_id,
            "output_index": index,
            "arguments": arguments,
        }
        done = {**item, "arguments": arguments, "status": "completed"}
        assert payloads[start + 4]["output_index"] == index
        assert payloads[start + 4]["item"] == done
        calls.append(done)

    completed = payloads[-1]["response"]
    assert completed["id"] == response_id
    assert completed["status"] == "completed"
    assert completed["incomplete_details"] is None
    assert completed["output"] == [message, *calls]
    assert completed["usage"] == {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 70,
    }


def test_capture_fields_never_appear_in_events() -> None:
    wire = b"".join(e.encode() for e in run(TOOL_CALL_CHUNKS))
    for field in (b"token_ids", b"prompt_token_ids", b"logprobs"):
        assert field not in wire


def test_reasoning_item_before_text() -> None:
    events = run(
        [
            chunk({"role": "assistant", "reasoning_content": "Let me "}),
            chunk({"reasoning": "think."}),  # newer vLLM names the field "reasoning"
            chunk({"content": "42"}),
            chunk({}, "stop"),
        ]
    )
    payloads = [data(e) for e in events]
    assert [p["type"] for p in payloads[2:7]] == [
        "response.output_item.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.output_item.done",
    ]
    rs_id = payloads[2]["item"]["id"]
    assert payloads[2]["item"] == {"type": "reasoning", "id": rs_id, "summary": []}
    assert payloads[3] == {
        "type": "response.reasoning_summary_text.delta",
        "sequence_number": 3,
        "item_id": rs_id,
        "output_index": 0,
        "summary_index": 0,
        "delta": "Let me ",
    }
    assert payloads[5]["text"] == "Let me think."
    reasoning = {
        "type": "reasoning",
        "id": rs_id,
        "summary": [{"type": "summary_text", "text": "Let me think."}],
    }
    assert payloads[6]["item"] == reasoning
    assert payloads[7]["output_index"] == 1  # the message comes second
    final = payloads[-1]["response"]
    assert final["output"][0] == reasoning
    assert final["output"][1]["content"][0]["text"] == "42"
    assert final["usage"] is None  # the upstream sent no usage chunk


def test_length_is_incomplete() -> None:
    events = run([chunk({"content": "Hel"}), chunk({}, "length"), usage_chunk()])
    last = data(events[-1])
    assert events[-1].event == last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["content"][0]["text"] == "Hel"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (500, "server_error"),
        (502, "server_error"),
        (429, "rate_limit_exceeded"),
        (400, "invalid_request"),
    ],
)
def test_error_mid_stream_is_response_failed(status: int, code: str) -> None:
    translator = ResponsesStreamTranslator(REQUEST)
    events = [e for c in TOOL_CALL_CHUNKS[:5] for e in translator.feed(c)]
    events += translator.error(status, "upstream went away")
    payloads = [data(e) for e in events]
    assert [p["sequence_number"] for p in payloads] == list(range(len(events)))
    failed = payloads[-1]
    assert events[-1].event == failed["type"] == "response.failed"
    response = failed["response"]
    assert response["id"] == payloads[0]["response"]["id"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": code, "message": "upstream went away"}
    assert [o["type"] for o in response["output"]] == ["message"]  # the items closed so far
    assert translator.finish() == []
    assert translator.feed(chunk({"content": "late"})) == []


def test_error_before_any_chunk_is_still_well_formed() -> None:
    events = ResponsesStreamTranslator(REQUEST).error(503, "down")
    assert [e.event for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]


def test_finish_twice_emits_nothing_the_second_time() -> None:
    translator = ResponsesStreamTranslator(REQUEST)
    translator.feed(chunk({"content": "hi"}))
    assert translator.finish()[-1].event == "response.completed"
    assert translator.finish() == []
    assert translator.error(500, "late") == []


def test_empty_upstream_stream_completes() -> None:
    events = run([])
    assert [e.event for e in events] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert data(events[-1])["response"]["output"] == []


def test_a_name_sent_after_the_first_delta_is_kept() -> None:
    first = {"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {}}]}
    later = {"tool_calls": [{"index": 0, "function": {"name": "shell", "arguments": "{}"}}]}
    events = run([chunk(first), chunk(later), chunk({}, "tool_calls")])
    [done] = [data(e)["item"] for e in events if e.event == "response.output_item.done"]
    assert (done["call_id"], done["name"], done["arguments"]) == ("c0", "shell", "{}")


def test_interleaved_tool_calls_raise() -> None:
    translator = ResponsesStreamTranslator(REQUEST)
    translator.feed(chunk(tool_delta(0, "{", "c0", "shell")))
    translator.feed(chunk(tool_delta(1, "{", "c1", "read")))
    with pytest.raises(TranslationError, match="tool call 0"):
        translator.feed(chunk(tool_delta(0, "}")))


def test_the_openai_sdk_reads_the_stream() -> None:
    """The official client parses our wire format and accumulates the same final response."""
    wire = b"".join(e.encode() for e in run(TOOL_CALL_CHUNKS))
    transport = httpx2.MockTransport(
        lambda _: httpx2.Response(200, content=wire, headers={"content-type": "text/event-stream"})
    )
    client = openai.OpenAI(
        api_key="none",
        base_url="http://proxy.invalid/v1",
        http_client=openai.DefaultHttpxClient(transport=transport),
    )
    with client.responses.stream(model="gpt-5-codex", input="list and read") as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert types[-1] == "response.completed"
    assert final.output_text == "I'll look."
    calls = [(o.call_id, o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert calls == [
        ("chatcmpl-tool-a", "shell", '{"cmd": ["ls"]}'),
        ("chatcmpl-tool-b", "read", '{"path": "a.txt"}'),
    ]


_ids = st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12).map("call_".__add__)
_names = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)
_arguments = st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5)).map(
    json.dumps
)


def split(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=4)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def answers(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, str]], list[JSON]]:
    """A chat answer (text and tool calls) and its stream, split at random boundaries."""
    text = draw(st.text(max_size=40))
    calls = draw(
        st.lists(st.tuples(_ids, _names, _arguments), max_size=3, unique_by=lambda c: c[0])
    )
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in split(draw, text)]
    for index, (call_id, name, arguments) in enumerate(calls):
        first, *rest = split(draw, arguments)
        chunks.append(chunk(tool_delta(index, first, call_id, name)))
        chunks += [chunk(tool_delta(index, piece)) for piece in rest]
    chunks += [chunk({}, "tool_calls" if calls else "stop"), usage_chunk()]
    return text, calls, chunks


@given(answers())
def test_property_stream_and_whole_answer_agree(
    answer: tuple[str, list[tuple[str, str, str]], list[JSON]],
) -> None:
    text, calls, chunks = answer
    events = [data(e) for e in run(chunks)]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))

    streamed_text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert streamed_text == text
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    arguments = {
        item["id"]: "".join(
            e["delta"]
            for e in events
            if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == item["id"]
        )
        for item in added
        if item["type"] == "function_call"
    }
    streamed_calls = [
        (i["call_id"], i["name"], arguments[i["id"]]) for i in added if i["type"] == "function_call"
    ]
    assert streamed_calls == calls

    final = events[-1]["response"]["output"]
    whole = chat_to_responses(
        {
            "choices": [
                {
                    "message": {
                        "content": text,
                        "tool_calls": [
                            {"id": c, "type": "function", "function": {"name": n, "arguments": a}}
                            for c, n, a in calls
                        ],
                    }
                }
            ]
        },
        REQUEST,
    )["output"]
    for items in (final, whole):
        assert [o["content"][0]["text"] for o in items if o["type"] == "message"] == (
            [text] if text else []
        )
        got = [
            (o["call_id"], o["name"], o["arguments"]) for o in items if o["type"] == "function_call"
        ]
        assert got == calls
    # The same items, ids aside.
    strip = [{k: v for k, v in o.items() if k != "id"} for o in final]
    assert strip == [{k: v for k, v in o.items() if k != "id"} for o in whole]


def test_sse_round_trip() -> None:
    """Encoded events parse back to the same names and data."""
    events = run(TOOL_CALL_CHUNKS)
    parsed = SSEParser().feed(b"".join(e.encode() for e in events))
    assert parsed == events


def test_a_streamed_call_of_a_namespaced_function_names_its_namespace() -> None:
    tools = [
        {"type": "function", "name": "shell"},
        {"type": "namespace", "name": "multi_agent_v1", "tools": [{"name": "spawn_agent"}]},
    ]
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk(tool_delta(0, '{"message": "go"}', "c1", "spawn_agent")),
        chunk(tool_delta(1, "{}", "c2", "shell")),
        chunk({}, "tool_calls"),
        usage_chunk(),
    ]
    events = run(chunks, {**REQUEST, "tools": tools})
    items = [
        data(e)["item"]
        for e in events
        if e.event in ("response.output_item.added", "response.output_item.done")
    ]
    assert [(i["name"], i.get("namespace")) for i in items] == [
        ("spawn_agent", "multi_agent_v1"),
        ("spawn_agent", "multi_agent_v1"),
        ("shell", None),
        ("shell", None),
    ]
    done = next(e for e in events if e.event == "response.completed")
    assert [i.get("namespace") for i in data(done)["response"]["output"]] == [
        "multi_agent_v1",
        None,
    ]
