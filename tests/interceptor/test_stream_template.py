"""A streamed Chat answer read against its template gives what the general path gives.

Streams here are mostly the chunks a template is learnt from and matches (vLLM's compact
chunks of one token), with texts and logprobs that test the template's grammar (escapes,
non-ASCII, numbers with exponents), chunks written another way (``\\u`` escapes, an integer
logprob, bytes that are not UTF-8, two ids) and the other chunks of a stream in between.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rollstream.apis.chat import Asked, Capture
from rollstream.apis.chat_template import ChunkTemplate
from tests.interceptor.test_stream_fast_path import (
    _function,
    _matching,
    _same_json,
    gathered,
)

JSON = dict[str, Any]
UPSTREAM = "Qwen/Qwen3-8B"
HEAD: JSON = {
    "id": "chatcmpl-7",
    "object": "chat.completion.chunk",
    "created": 5,
    "model": UPSTREAM,
}

texts = st.text(max_size=5) | st.sampled_from(
    ['"', "\\", "\n", "\t", "\x00", "\x7f", "\u2028", "é😀", "a/b", "</s>", ""]
)
floats = st.floats(max_value=0.0, allow_nan=False, allow_infinity=False)


def common(text: str, logprob: Any, ids: list[int], field: str = "content") -> JSON:
    """A one-token chunk as vLLM writes it."""
    entry = {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode()[:3]),
        "top_logprobs": [],
    }
    choice = {"index": 0, "delta": {field: text}, "logprobs": {"content": [entry]}}
    return HEAD | {"choices": [choice | {"finish_reason": None, "token_ids": ids}]}


@st.composite
def reads(draw: st.DrawFn) -> bytes:
    """One read: mostly a common chunk written as orjson writes it, now and then not."""
    kind = draw(
        st.sampled_from(["common"] * 12 + ["escaped", "int", "ids", "utf8", "field", "end"])
    )
    text, ids = draw(texts), [draw(st.integers(0, 2**32 - 1))]
    logprob: Any = draw(floats)
    if kind == "end":
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
        return b"data: " + orjson.dumps(HEAD | {"choices": [choice]}) + b"\n\n"
    if kind == "int":
        logprob = draw(st.sampled_from([0, -3]))
    if kind == "ids":
        ids = [*ids, 7]
    field = (
        draw(st.sampled_from(["reasoning_content", "reasoning"])) if kind == "field" else "content"
    )
    chunk = common(text, logprob, ids, field)
    if kind == "escaped":  # \\u escapes, compact: a template learnt elsewhere still matches
        raw = json.dumps(chunk, ensure_ascii=True, separators=(",", ":")).encode()
    else:
        raw = orjson.dumps(chunk)
    if kind == "utf8":
        raw = raw.replace(b'"token":"', b'"token":"\xff', 1)
    return b"data: " + raw + b"\n\n"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([Asked(), Asked(True, True), Asked(True, False)]),
    st.sampled_from([UPSTREAM, "harness-model", None]),
    st.lists(reads(), min_size=3, max_size=30),
)
def test_a_stream_read_against_its_template_gives_what_the_general_path_gives(
    asked: Asked, model: str | None, upstream: list[bytes]
) -> None:
    body: JSON = {"messages": [], "stream": True} | ({"model": model} if model else {})
    matched: list[bool] = []
    fast_state, fast = _function(body, asked, fast=True)
    slow_state, slow = _function(body, asked, fast=False)
    for read in [*upstream, b""]:
        with _matching(matched):
            fast_out = list(fast(read))
        slow_out = list(slow(read))
        if fast_out != slow_out:  # only the upstream's own event, where nothing is stripped
            assert asked == Asked(True, True) and model != "harness-model"
            assert fast_out == [read] and _same_json(read, slow_out[0])
    assert gathered(fast_state.capture) == gathered(slow_state.capture)
    assert (fast_state.error, fast_state.first_token_at is None) == (
        slow_state.error,
        slow_state.first_token_at is None,
    )
    event(f"template matched {'some' if any(matched) else 'none'}")


def _with_top(chunk: JSON) -> JSON:
    entry = chunk["choices"][0]["logprobs"]["content"][0]
    entry["top_logprobs"] = [{"token": "b", "logprob": -2.0, "bytes": [98]}]
    return chunk


def _learnt(chunk: JSON) -> ChunkTemplate:
    """The template of ``chunk`` for a harness that asked for nothing and calls its model m."""
    template = ChunkTemplate.learn(chunk, b"data: " + orjson.dumps(chunk) + b"\n\n", Asked(), "m")
    assert template is not None
    return template


def test_a_matched_chunk_is_captured_and_stripped_without_a_parse() -> None:
    template = _learnt(common("a", -0.5, [3]))
    capture = Capture()
    raw = b"data: " + orjson.dumps(common('x "y"\n', -1.25e-07, [42])) + b"\n\n"
    sent = template.bind(capture)(raw)
    assert sent == (
        b'data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":5,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"x \\"y\\"\\n"},"logprobs":null,'
        b'"finish_reason":null}]}\n\n'
    )
    assert capture.completion_token_ids == [42] and capture.completion_logprobs == [-1.25e-07]
    assert capture.content == 'x "y"\n' and capture.saw_token_ids


@pytest.mark.parametrize(
    "raw",
    [
        orjson.dumps(common("a", -1, [3])),  # an integer logprob
        orjson.dumps(common("a", -0.5, [3, 4])),  # two ids
        orjson.dumps(common("a", -0.5, [3], "reasoning_content")),  # another field
        orjson.dumps(common("a", -0.5, [3])).replace(b'"a"', b'"\xff"', 1),  # not UTF-8
        orjson.dumps(common("a", -0.5, [3])).replace(b"[3]", b"[03]"),  # not JSON
        orjson.dumps(common("a", -0.5, [3])).replace(b"-0.5", b"-.5"),  # not JSON either
        orjson.dumps(common("a", -0.5, [3])).replace(b"}]}", b'}],"x":1}'),  # more fields
        json.dumps(common("a", -0.5, [3])).encode(),  # spaced
    ],
)
def test_a_chunk_off_the_template_is_left_alone(raw: bytes) -> None:
    capture = Capture()
    assert _learnt(common("b", -0.25, [9])).bind(capture)(b"data: " + raw + b"\n\n") is None
    assert capture == Capture(saw_token_ids=True)  # as bound: nothing of the read


@pytest.mark.parametrize(
    ("chunk", "asked", "model"),
    [
        (common("a", -0.5, [3]), Asked(True, False), None),  # ids kept, logprobs stripped
        (common("a", -0.5, [3]), Asked(True, True), "renamed"),  # nothing stripped, renamed
        (common("a", -0.5, [3, 4]), Asked(), None),  # two ids
        (_with_top(common("a", -0.5, [3])), Asked(), None),  # top logprobs
    ],
)
def test_what_teaches_no_template(chunk: JSON, asked: Asked, model: str | None) -> None:
    raw = b"data: " + orjson.dumps(chunk) + b"\n\n"
    assert ChunkTemplate.learn(chunk, raw, asked, model) is None


def test_a_chunk_not_written_as_orjson_writes_teaches_no_template() -> None:
    chunk = common("a", -0.5, [3])
    raw = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    assert ChunkTemplate.learn(chunk, raw, Asked(), None) is None


def test_logprobs_as_vllm_writes_them_are_read_to_the_floats_orjson_reads() -> None:
    # pydantic (vLLM) and orjson write -1e-7, not -1e-07, and small values without a fraction.
    template = _learnt(common("a", -1e-7, [3]))  # learnt from such a chunk too
    capture = Capture()
    read = template.bind(capture)
    for spelt in [b"-1e-7", b"-0.00001234", b"-2.5e-10", b"-1E+2", b"0.0", b"-9999.0"]:
        raw = orjson.dumps(common("b", -0.5, [4])).replace(b"-0.5", spelt)
        assert read(b"data: " + raw + b"\n\n") is not None
        assert capture.completion_logprobs[-1] == orjson.loads(spelt)
    assert (
        read(b"data: " + orjson.dumps(common("b", -0.5, [4])).replace(b"-0.5", b"-1") + b"\n\n")
        is None
    )
