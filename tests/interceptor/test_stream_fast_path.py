"""The fast path of a streamed Chat call changes nothing the harness or the record sees.

The same upstream reads go through the per-read function twice, with the fast path and
without (``stream_function(..., fast=False)``, the general path). Read by read the harness gets
the same bytes; or, only where the fast path forwards the upstream's own event (nothing to
strip), that event, which holds the same JSON as the general path's. The capture ends equal.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import fields
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.apis.chat import Asked, Capture, strip_chunk
from rollstream.apis.chat_fast import FastPath, chunk_fast_path
from rollstream.apis.chat_template import ChunkTemplate
from rollstream.apis.sse import SSEEvent
from rollstream.interceptor import streaming
from rollstream.interceptor.recording import CallState
from rollstream.interceptor.streaming import stream_function
from rollstream.schemas import ApiKind
from tests.interceptor import stream_chunk_bench
from tests.interceptor.stream_chunk_bench import vllm_reads

JSON = dict[str, Any]
UPSTREAM = "Qwen/Qwen3-8B"
HEAD: JSON = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1}

texts = st.text(max_size=6) | st.sampled_from(['"', "\\", '\\"', "\n\t", "\u2028", "é😀", "</s>"])
logprob_values = st.floats(max_value=0.0, allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0, -1, None, True, 1e-320]
)
token_ids = st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=3)


@st.composite
def entries(draw: st.DrawFn, count: int) -> list[Any]:
    """``count`` logprob entries as vLLM writes them, some with odd or missing values."""
    out: list[Any] = []
    for _ in range(count):
        entry: JSON = {"token": draw(texts)}
        if draw(st.integers(0, 9)):  # now and then no logprob at all
            entry["logprob"] = draw(logprob_values)
        entry["bytes"] = draw(st.lists(st.integers(0, 255), max_size=3))
        tops = draw(st.lists(st.tuples(texts, logprob_values), max_size=2))
        entry["top_logprobs"] = [{"token": t, "logprob": lp, "bytes": []} for t, lp in tops]
        out.append(entry if draw(st.integers(0, 30)) else "not an entry")
    return out


@st.composite
def choices(draw: st.DrawFn, delta: JSON, finish: str | None = None, ids: bool = True) -> JSON:
    """A choice with its capture fields: as many entries as ids, now and then not."""
    chosen = draw(token_ids) if ids else []
    count = len(chosen) if draw(st.integers(0, 6)) else draw(st.integers(0, 3))
    choice: JSON = {"index": 0, "delta": delta, "logprobs": {"content": draw(entries(count))}}
    choice |= {"finish_reason": finish, "token_ids": chosen}
    if finish is not None:
        choice["stop_reason"] = draw(st.none() | st.just("</s>") | st.just(7))
    return choice


def _chunk(model: str | None, *chosen: JSON, **top: Any) -> JSON:
    head = HEAD | ({"model": model} if model is not None else {})
    return head | {"choices": list(chosen)} | top


@st.composite
def chunks(draw: st.DrawFn) -> JSON:
    """One upstream chunk: mostly one token of text, and every other kind the stream carries."""
    model = draw(st.sampled_from([UPSTREAM, UPSTREAM, "other", None]))
    kind = draw(
        st.sampled_from(["text"] * 5 + ["reasoning", "tool", "finish", "usage"] + ["odd"] * 4)
    )
    if kind == "text":
        return _chunk(model, draw(choices({"content": draw(texts)})))
    if kind == "reasoning":
        names = draw(
            st.sampled_from([["reasoning"], ["reasoning_content"], ["reasoning", "content"]])
        )
        delta = {name: draw(texts) if name != "content" else None for name in names}
        return _chunk(model, draw(choices(delta)))
    if kind == "tool":
        call = {"index": 0, "function": {"arguments": draw(texts)}}
        if draw(st.booleans()):
            call |= {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
        return _chunk(model, draw(choices({"tool_calls": [call]})))
    if kind == "finish":
        delta = draw(st.sampled_from([{}, {"content": ""}, {"content": "."}]))
        finish = draw(st.sampled_from(["stop", "length", "tool_calls"]))
        return _chunk(model, draw(choices(delta, finish, ids=draw(st.booleans()))))
    if kind == "usage":
        return _chunk(model, usage={"prompt_tokens": 3, "completion_tokens": 9})
    return draw(odd_chunks(model))


def odd_chunk(variant: str, choice: JSON, model: str | None) -> JSON:
    """A text chunk just off the common shape: it must go the general way, or come out equal."""
    if variant == "two choices":
        return _chunk(model, choice, choice | {"index": 1})
    if variant == "error":
        return {"error": {"message": "upstream failed", "code": 500}}
    tops: dict[str, JSON] = {
        "usage null": {"usage": None},
        "usage": {"usage": {"prompt_tokens": 1, "completion_tokens": 2}},
        "prompt ids": {"prompt_token_ids": [1, 2], "system_fingerprint": "fp"},
        "meta_info": {"meta_info": {"id": "x"}},
    }
    changes: dict[str, JSON] = {
        "no logprobs": {"logprobs": None},
        "logprobs without content": {"logprobs": {"content": None}},
        "index 1": {"index": 1},
        "empty delta": {"delta": {}, "message": {"content": "m"}},
        "choice meta_info": {"meta_info": {"output_token_logprobs": [[-0.5, 7, "x"]]}},
        "choice prompt ids": {"prompt_token_ids": [4, 5]},
        "content not text": {"delta": {"content": 7}},
        "content a list": {"delta": {"content": ["x"]}},
        "content null": {"delta": {"content": None}},
        "ids not a list": {"token_ids": "7"},
    }
    choice |= changes.get(variant, {})
    if variant == "no ids":
        del choice["token_ids"]
    return _chunk(model, choice, **tops.get(variant, {}))


ODD = [
    "two choices",
    "error",
    "usage null",
    "usage",
    "prompt ids",
    "meta_info",
    "no logprobs",
    "logprobs without content",
    "index 1",
    "empty delta",
    "choice meta_info",
    "choice prompt ids",
    "content not text",
    "content a list",
    "content null",
    "ids not a list",
    "no ids",
]


@st.composite
def odd_chunks(draw: st.DrawFn, model: str | None) -> JSON:
    """One of the :data:`ODD` chunks."""
    choice = draw(choices({"content": draw(texts)}))
    return odd_chunk(draw(st.sampled_from(ODD)), choice, model)


def _encode(chunk: JSON, style: str) -> bytes:
    if style == "orjson":  # compact, as vLLM's pydantic writes it
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
    text = json.dumps(chunk, ensure_ascii=style == "ascii")  # spaces, escapes
    return b"data: " + text.encode() + b"\n\n"


def _stream(draw: st.DrawFn) -> tuple[list[bytes], str]:
    style = draw(st.sampled_from(["orjson", "orjson", "spaced", "ascii"]))
    first = _chunk(UPSTREAM, draw(choices({"role": "assistant", "content": ""}, ids=False)))
    if draw(st.booleans()):
        del first["choices"][0]["token_ids"]  # as vLLM's first chunk has it, unasked
    if draw(st.booleans()):
        first["prompt_token_ids"] = draw(st.lists(st.integers(0, 2**32 - 1), max_size=5))
    body = draw(st.lists(chunks(), min_size=1, max_size=25))
    events = [_encode(c, style) for c in [first, *body]]
    events += [b"data: [DONE]\n\n"] if draw(st.integers(0, 5)) else []
    if draw(st.integers(0, 3)):
        return events, style  # one event a read, as a busy stream arrives
    data = b"".join(events)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a], style


@st.composite
def calls(draw: st.DrawFn) -> tuple[JSON, Asked, list[bytes], str]:
    """A harness's request, what it asked for, and the upstream's reads of its answer."""
    asked = Asked(draw(st.booleans()), draw(st.booleans()), draw(st.booleans()))
    body: JSON = {"messages": [], "stream": True}
    model = draw(st.sampled_from([UPSTREAM, "harness-model", None]))
    body |= {"model": model} if model is not None else {}
    reads, style = _stream(draw)
    return body, asked, reads, style


def _function(body: JSON, asked: Asked, fast: bool) -> tuple[CallState, Any]:
    state = CallState(ApiKind.CHAT_COMPLETIONS, "s", body, stream=True, asked=asked)
    translator = ADAPTER_BY_KIND[ApiKind.CHAT_COMPLETIONS].stream(body, asked)
    return state, stream_function(state, translator, fast=fast)


def gathered(capture: Capture) -> JSON:
    """Everything a capture holds, NaN (a missing logprob) made comparable."""
    view = {f.name: getattr(capture, f.name) for f in fields(capture)}
    view |= {"content_parts": capture.content, "tool_call_parts": capture.tool_calls}
    view["completion_logprobs"] = [
        "nan" if math.isnan(v) else v for v in capture.completion_logprobs
    ]
    return view | {"logprobs_aligned": capture.logprobs is not None}


def _same_json(upstream: bytes, general: bytes) -> bool:
    def pairs(event: bytes) -> list[Any]:
        assert event.startswith(b"data: ") and event.endswith(b"\n\n")
        parsed: list[Any] = json.loads(event[6:-2], object_pairs_hook=list)
        return parsed  # as pairs: their order and any duplicate count

    return pairs(upstream) == pairs(general)


def _counting(taken: list[bool]) -> Any:
    """``chunk_fast_path`` noting, for each read its parsed path saw, whether it took it."""

    def make(capture: Capture, asked: Asked, harness_model: str | None) -> FastPath:
        path = chunk_fast_path(capture, asked, harness_model)
        parsed = path.parsed

        def counted(chunk: JSON, raw: bytes) -> bytes | None:
            sent = parsed(chunk, raw)
            taken.append(sent is not None)
            return sent

        path.parsed = counted
        return path

    return make


def _matching(matched: list[bool]) -> Any:
    """``ChunkTemplate.bind`` making readers that note whether each read they saw matched."""
    bind = ChunkTemplate.bind

    def counted(self: ChunkTemplate, capture: Capture) -> Any:
        match = bind(self, capture)

        def note(raw: bytes) -> bytes | None:
            sent = match(raw)
            matched.append(sent is not None)
            return sent

        return note

    return mock.patch.object(ChunkTemplate, "bind", counted)


@settings(max_examples=300, deadline=None)
@given(calls())
def test_the_fast_path_gives_what_the_general_path_gives(
    call: tuple[JSON, Asked, list[bytes], str],
) -> None:
    body, asked, reads, style = call
    taken: list[bool] = []
    matched: list[bool] = []
    with mock.patch.object(streaming, "chunk_fast_path", _counting(taken)):
        fast_state, fast = _function(body, asked, fast=True)
    slow_state, slow = _function(body, asked, fast=False)
    nothing_to_strip = asked.token_ids and asked.logprobs
    for read in [*reads, b""]:
        with _matching(matched):
            fast_out = list(fast(read))
        slow_out = list(slow(read))
        if fast_out != slow_out:
            # Only an event forwarded as the upstream wrote it, JSON for JSON the same; never
            # where the upstream writes as orjson does, nor where anything was stripped.
            assert style != "orjson" and nothing_to_strip
            assert fast_out == [read] and len(slow_out) == 1
            assert _same_json(read, slow_out[0])
            event("forwarded as the upstream wrote it")
    assert gathered(fast_state.capture) == gathered(slow_state.capture)
    assert fast_state.capture == slow_state.capture or any(
        math.isnan(v) for v in slow_state.capture.completion_logprobs
    )
    assert (fast_state.error, fast_state.status) == (slow_state.error, slow_state.status)
    assert (fast_state.first_token_at is None) is (slow_state.first_token_at is None)
    event(f"fast path taken: {'some' if any(taken) else 'none'}")
    event(f"template matched: {'some' if any(matched) else 'none'}")


def test_a_vllm_stream_takes_the_fast_path_for_every_token_and_sends_the_same_bytes() -> None:
    reads = vllm_reads(40, top_logprobs=2)
    for asked, model in [(Asked(), "harness-model"), (Asked(True, True), UPSTREAM)]:
        body = {"model": model, "messages": [], "stream": True}
        taken: list[bool] = []
        matched: list[bool] = []
        with mock.patch.object(streaming, "chunk_fast_path", _counting(taken)):
            fast_state, fast = _function(body, asked, fast=True)
        slow_state, slow = _function(body, asked, fast=False)
        for read in [*reads, b""]:
            with _matching(matched):
                assert list(fast(read)) == list(slow(read))
        # Every token's read; the role and finish chunks not. Top logprobs: no template.
        assert taken.count(True) == 40 and not any(matched)
        assert fast_state.capture == slow_state.capture
        assert len(fast_state.capture.completion_token_ids) == 40
        assert fast_state.capture.finish_reason == "length"
        assert fast_state.first_token_at is not None and fast_state.error is None


def _general(chunk: JSON, asked: Asked, harness_model: str | None) -> tuple[Capture, bytes]:
    """What the general path captures and sends for one chunk."""
    capture = Capture()
    capture.add_chunk(chunk)
    out = strip_chunk(chunk, asked, harness_model)
    return capture, SSEEvent(out).encode() if out is not None else b""


TAKEN = {"usage null", "content not text", "content a list", "content null"}
TEXT_CHOICE: JSON = {
    "index": 0,
    "delta": {"content": 'a "quoted" \\ é'},
    "logprobs": {"content": [{"token": "a", "logprob": -0.25, "bytes": [97], "top_logprobs": []}]},
    "finish_reason": None,
    "token_ids": [42],
}


@pytest.mark.parametrize("variant", ODD)
@pytest.mark.parametrize("asked", [Asked(), Asked(True, True)], ids=["unasked", "asked"])
def test_a_chunk_off_the_common_shape_is_left_alone_or_handled_alike(
    variant: str, asked: Asked
) -> None:
    chunk = odd_chunk(variant, copy.deepcopy(TEXT_CHOICE), UPSTREAM)
    raw = _encode(chunk, "orjson")
    capture = Capture()
    parsed = orjson.loads(raw[6:-2])
    sent = chunk_fast_path(capture, asked, "harness-model").parsed(parsed, raw)
    assert (sent is not None) is (variant in TAKEN)
    if sent is None:  # declined before touching anything
        assert capture == Capture() and parsed == chunk
        return
    general_capture, general_sent = _general(chunk, asked, "harness-model")
    assert capture == general_capture and sent == general_sent


@pytest.mark.parametrize("asked", [Asked(), Asked(True, False), Asked(False, True)])
@pytest.mark.parametrize("model", [None, UPSTREAM, "harness-model"])
def test_a_common_chunk_is_captured_and_stripped_as_the_general_path_does(
    asked: Asked, model: str | None
) -> None:
    chunk = _chunk(UPSTREAM, copy.deepcopy(TEXT_CHOICE))
    raw = _encode(chunk, "spaced")  # not as orjson writes it: the output is written again
    capture = Capture()
    sent = chunk_fast_path(capture, asked, model).parsed(orjson.loads(raw[6:-2]), raw)
    assert (capture, sent) == _general(chunk, asked, model)
    assert capture.content == 'a "quoted" \\ é' and capture.completion_logprobs == [-0.25]


def test_with_nothing_to_strip_the_upstream_event_goes_out_as_it_came() -> None:
    chunk = _chunk(UPSTREAM, copy.deepcopy(TEXT_CHOICE))
    raw = _encode(chunk, "ascii")
    for model in [None, UPSTREAM]:
        capture = Capture()
        fast = chunk_fast_path(capture, Asked(True, True), model).parsed
        assert fast(orjson.loads(raw[6:-2]), raw) is raw
        assert capture == _general(chunk, Asked(True, True), model)[0]


def test_the_micro_benchmark_runs() -> None:
    result = stream_chunk_bench.compare(tokens=20, rounds=2)
    assert set(result) == set(stream_chunk_bench.CASES)
    assert all(best > 0 for paths in result.values() for best, _ in paths.values())
