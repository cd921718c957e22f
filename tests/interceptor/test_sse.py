"""The SSE parser and encoder: any byte split, both line endings, names, comments, non-JSON."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rollstream.interceptor.translate.sse import DONE, SSEEvent, SSEParser

STREAM = (
    b": keep-alive comment\n\n"
    b'event: message_start\ndata: {"type": "message_start", "text": "h\xc3\xa9llo"}\n\n'
    b'data: {"a": 1}\r\n\r\n'
    b"data: first line\ndata: second line\n\n"
    b"retry: 100\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent({"type": "message_start", "text": "héllo"}, "message_start"),
    SSEEvent({"a": 1}),
    SSEEvent("first line\nsecond line"),
    SSEEvent(DONE),
]


def test_whole_stream() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    """Chunks arrive at arbitrary byte boundaries, even inside a UTF-8 character."""
    parser = SSEParser()
    bounds = [0, *sorted(cuts), len(STREAM)]
    events = [e for a, b in itertools.pairwise(bounds) for e in parser.feed(STREAM[a:b])]
    assert events + parser.flush() == EXPECTED


def test_unterminated_last_event_is_flushed() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"x": 2}') == []
    assert parser.flush() == [SSEEvent({"x": 2})]
    assert parser.flush() == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.text(), json_values, max_size=4), st.none() | st.sampled_from(["a", "b"]))
def test_encode_then_parse_round_trips(data: dict[str, Any], name: str | None) -> None:
    event = SSEEvent(data, name)
    assert SSEParser().feed(event.encode()) == [event]
