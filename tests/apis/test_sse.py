"""The SSE parser and encoder: any byte split, both line endings, names, comments, non-JSON."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.apis.sse import DONE, SSEEvent, SSEParser

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


KEY = "prompt_token_ids"


@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.text(max_size=5), json_values, max_size=3),
            st.none() | st.lists(st.integers(0, 2**32 - 1), max_size=20),
        ),
        min_size=1,
        max_size=4,
    ),
    st.lists(st.integers(min_value=0, max_value=10**6), max_size=6),
)
def test_taking_ids_moves_them_out_of_the_data_and_nothing_else(
    chunks: list[tuple[dict[str, Any], list[int] | None]], cuts: list[int]
) -> None:
    """With ``take_ids`` a chunk's top-level ids arrive packed beside the rest of its data."""
    datas = [
        {**d, KEY: ids} if ids is not None else {k: v for k, v in d.items() if k != KEY}
        for d, ids in chunks
    ]
    stream = b"".join(SSEEvent(d).encode() for d in datas) + SSEEvent(DONE).encode()
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    parser = SSEParser(take_ids=KEY)
    events = [e for a, b in itertools.pairwise(bounds) for e in parser.feed(stream[a:b])]
    events += parser.flush()
    assert events[-1] == SSEEvent(DONE)
    assert len(events) == len(datas) + 1
    for event, data in zip(events, datas, strict=False):
        ids = data.get(KEY)
        if ids is None:
            assert event == SSEEvent(data)
        else:  # orjson writes the lists compactly: they always take the fast path
            assert event.data == {k: v for k, v in data.items() if k != KEY}
            assert event.token_ids == struct.pack(f"<{len(ids)}I", *ids)


def test_taking_ids_is_only_for_the_named_key_and_leaves_other_events_alone() -> None:
    stream = b'data: {"a": [1, 2]}\n\ndata: {"prompt_token_ids": [3, 1.5]}\n\n'
    events = SSEParser(take_ids=KEY).feed(stream)
    assert events == [SSEEvent({"a": [1, 2]}), SSEEvent({KEY: [3, 1.5]})]
    assert SSEParser().feed(b'data: {"prompt_token_ids": [3]}\n\n') == [SSEEvent({KEY: [3]})]


#: The reads above that are one whole event of one data line holding a JSON object.
ONE_EVENT = {
    b'data: {"a": 1}\n\n',
    b'data: {"a": "\\u00e9\\n"}\n\n',
    b'data: {"prompt_token_ids": [1]}\n\n',
}


@pytest.mark.parametrize(
    "read",
    [
        b'data: {"a": 1}\n\n',
        b'data: {"a": "\\u00e9\\n"}\n\n',
        b'data: {"a":\r1}\n\n',  # a CR ends the line: the data is '{"a":'
        b'data: {"a": 1}\r\n\n',
        b'data: {"a": 1}\n\ndata: {"b": 2}\n\n',
        b'data: {"a": 1}\n',
        b'data: {"a": 1}\n\n\n',
        b"data: [1]\n\n",
        b"data: {NaN}\n\n",
        b'data: {"a": NaN}\n\n',  # only the standard library reads it
        b'event: x\ndata: {"a": 1}\n\n',
        b'data: {"prompt_token_ids": [1]}\n\n',
    ],
)
@pytest.mark.parametrize("take_ids", [None, KEY])
@pytest.mark.parametrize("buffered", [b"", b'data: {"x"'])
def test_single_gives_a_one_event_read_as_feed_does_and_declines_the_rest(
    read: bytes, take_ids: str | None, buffered: bytes
) -> None:
    one, other = SSEParser(take_ids=take_ids), SSEParser(take_ids=take_ids)
    assert one.feed(buffered) == other.feed(buffered) == []
    expected = other.feed(read) + other.flush()
    single = one.single(read)
    if single is not None:
        assert expected == [SSEEvent(single)]
        assert not buffered and read.count(b"\n") == 2 and b"\r" not in read
        assert not (take_ids and KEY.encode() in read)
    else:
        assert one.feed_general(read) + one.flush() == expected
    taken = read in ONE_EVENT and not buffered and not (take_ids and KEY.encode() in read)
    assert (single is not None) is taken
