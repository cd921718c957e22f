"""Hot-path JSON: orjson where it can, the standard library for what orjson refuses; the token
ids of a stream's first chunk parsed straight into packed uint32, exactly as the ordinary parse."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.schemas import jsonfast

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_same_as_the_standard_library(value: Any) -> None:
    encoded = jsonfast.dumps(value)
    assert json.loads(encoded) == json.loads(json.dumps(value))
    assert jsonfast.loads(encoded) == json.loads(encoded)


def test_what_orjson_refuses_falls_back() -> None:
    assert math.isnan(jsonfast.loads(b'{"x": NaN}')["x"])
    assert json.loads(jsonfast.dumps({"seed": 2**70})) == {"seed": 2**70}
    assert jsonfast.dumps({"é": 1}) == '{"é":1}'.encode()  # UTF-8, not \\u escapes


@pytest.mark.parametrize("bad", [b"{bad", b"\xff\xfe", "", b'{"a": 1'])
def test_invalid_json_is_a_value_error(bad: bytes | str) -> None:
    with pytest.raises(ValueError):
        jsonfast.loads(bad)


# -- loads_taking_ids: the prompt's token ids straight into packed uint32 -----------------------

KEY = "prompt_token_ids"
# Bytes that make up JSON, the key's own text, and what numbers may be mistaken for.
_ALPHABET = [*' \t\n\r{}[]:,"\\-+.eE0123456789', "prompt_token_ids", '"prompt_token_ids"']


def _reference(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    """What the ordinary parse and packing give, None where the ids are not a uint32 list."""
    try:
        parsed = jsonfast.loads(data)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get(KEY), list):
        return None
    ids = parsed.pop(KEY)
    if not all(type(i) is int and 0 <= i < 2**32 for i in ids):
        return None
    return parsed, struct.pack(f"<{len(ids)}I", *ids)


def _check(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    taken = jsonfast.loads_taking_ids(data, KEY)
    if taken is not None:  # never a result the ordinary parse would not give
        assert taken == _reference(data)
    return taken


ids_lists = st.lists(
    st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 9, 10, 2**32 - 1]), max_size=40
)
odd_values = st.lists(
    st.integers(-5, 2**64) | st.floats(allow_nan=False) | st.text(max_size=3) | st.none(),
    max_size=5,
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """A chunk-like object with the ids somewhere, written in any JSON spacing."""
    obj: dict[str, Any] = draw(st.dictionaries(st.text(max_size=8), values, max_size=4))
    obj.pop(KEY, None)
    ids = draw(ids_lists | odd_values)
    entries = list(obj.items())
    entries.insert(draw(st.integers(0, len(entries))), (KEY, ids))
    spaces = draw(st.lists(st.sampled_from(["", " ", "  ", "\n", "\t", "\r\n"]), min_size=8))
    item_sep = draw(st.sampled_from([",", ", "])) + spaces[0]
    key_sep = spaces[1] + ":" + spaces[2]
    body = item_sep.join(
        json.dumps(k) + key_sep + json.dumps(v, separators=(item_sep, key_sep)) for k, v in entries
    )
    return ("{" + spaces[3] + body + spaces[4] + "}").encode()


@given(documents())
def test_taking_ids_agrees_with_the_ordinary_parse(data: bytes) -> None:
    _check(data)


@given(
    documents(),
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 3), st.sampled_from(_ALPHABET)),
        min_size=1,
        max_size=4,
    ),
)
def test_taking_ids_agrees_on_damaged_documents(
    data: bytes, edits: list[tuple[int, int, str]]
) -> None:
    """Bytes cut out, replaced or put in anywhere (inside strings, numbers, the key)."""
    for at, cut, text in edits:
        at %= len(data) + 1
        data = data[:at] + text.encode() + data[at + cut :]
    _check(data)


@given(st.lists(st.sampled_from(_ALPHABET), max_size=40))
def test_taking_ids_agrees_on_arbitrary_bytes(parts: list[str]) -> None:
    _check("".join(parts).encode())


@pytest.mark.parametrize("separator", [b",", b", "])
def test_server_chunks_take_the_fast_path(separator: bytes) -> None:
    ids = [1, 0, 151644, 2**32 - 1, 10]
    chunk = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "token_ids": []}],
        KEY: ids,
        "model": "m",
    }
    data = json.dumps(chunk, separators=(separator.decode(), ": ")).encode()
    rest = {k: v for k, v in chunk.items() if k != KEY}
    assert jsonfast.loads_taking_ids(data, KEY) == (rest, struct.pack("<5I", *ids))


@pytest.mark.parametrize(
    "data",
    [
        b'{"prompt_token_ids": [01, 2]}',  # a leading zero: not JSON
        b'{"prompt_token_ids": [4294967296]}',  # past uint32
        b'{"prompt_token_ids": [99999999999999999999999]}',  # past int64 (numpy saturates)
        b'{"prompt_token_ids": [1,, 2]}',
        b'{"prompt_token_ids": [1 2]}',
        b'{"prompt_token_ids": [1, 2,]}',
        b'{"prompt_token_ids": [ , ]}',
        b'{"prompt_token_ids": [-1]}',
        b'{"a": {"prompt_token_ids": [1]}}',  # not top-level
        b'{"a": "\\"prompt_token_ids\\": [1]"}',  # inside a string
        b'{"x\\"prompt_token_ids": [5], "prompt\\u005ftoken_ids": []}',  # a key ending in it
        b'{"prompt_token_ids": [1], "prompt\\u005ftoken_ids": [2]}',  # the escaped one wins
        b'{"prompt_token_ids": [1], "prompt_token_ids": [2]}',
        b'{"prompt_token_ids": [1]} trailing',
    ],
)
def test_what_is_not_a_plain_top_level_uint32_list_is_left_to_the_ordinary_parse(
    data: bytes,
) -> None:
    assert jsonfast.loads_taking_ids(data, KEY) is None
