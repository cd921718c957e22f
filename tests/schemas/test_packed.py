"""Packed token ids, logprobs and masks: layout, round trips, prefixes."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from rollstream.schemas import Logprobs, LossMask, TokenIds

u32 = st.integers(min_value=0, max_value=2**32 - 1)
ids = st.lists(u32, max_size=200)


def test_token_ids_are_little_endian_uint32() -> None:
    assert TokenIds.from_list([1, 0x01020304]).data == b"\x01\x00\x00\x00\x04\x03\x02\x01"


def test_logprobs_are_little_endian_float32() -> None:
    assert Logprobs.from_list([-0.5]).data == struct.pack("<f", -0.5)


@given(ids)
def test_ids_round_trip(values: list[int]) -> None:
    packed = TokenIds.from_list(values)
    assert packed.to_list() == values
    assert len(packed) == len(values)
    assert TokenIds(packed.data) == packed
    assert list(packed) == values


@given(st.lists(st.floats(width=32, allow_nan=False), max_size=100))
def test_logprobs_round_trip_at_float32_precision(values: list[float]) -> None:
    assert Logprobs.from_list(values).to_list() == values


@pytest.mark.parametrize("bad", [[-1], [2**32]])
def test_out_of_range_ids_are_rejected(bad: list[int]) -> None:
    with pytest.raises(ValueError, match="TokenIds"):
        TokenIds.from_list(bad)


def test_bytes_of_the_wrong_length_are_rejected() -> None:
    with pytest.raises(ValueError, match="not a multiple of 4"):
        TokenIds(b"\x00\x00\x00")


@given(ids, st.integers(min_value=-250, max_value=250), st.integers(min_value=-250, max_value=250))
def test_slicing_matches_list_slicing(values: list[int], start: int, stop: int) -> None:
    packed = TokenIds.from_list(values)
    assert packed[start:stop].to_list() == values[start:stop]
    assert packed[::2].to_list() == values[::2]
    if values:
        assert packed[start % len(values)] == values[start % len(values)]
        assert packed[-1] == values[-1]


def test_index_out_of_range() -> None:
    with pytest.raises(IndexError):
        TokenIds.from_list([1, 2])[2]


@given(ids, ids)
def test_common_prefix_len_matches_a_naive_scan(a: list[int], b: list[int]) -> None:
    expected = 0
    while expected < min(len(a), len(b)) and a[expected] == b[expected]:
        expected += 1
    pa, pb = TokenIds.from_list(a), TokenIds.from_list(b)
    assert pa.common_prefix_len(pb) == expected
    assert pa.startswith(pb) == (a[: len(b)] == b)


@given(ids, ids)
def test_concatenation(a: list[int], b: list[int]) -> None:
    assert (TokenIds.from_list(a) + TokenIds.from_list(b)).to_list() == a + b


def test_types_do_not_mix() -> None:
    assert TokenIds.from_list([1]) != LossMask.from_list([1])
    with pytest.raises(TypeError):
        _ = TokenIds.from_list([1]) + Logprobs.from_list([1.0])


class _Holder(BaseModel):
    ids: TokenIds
    logprobs: Logprobs


def test_pydantic_accepts_lists_and_bytes_and_dumps_both_ways() -> None:
    held = _Holder(ids=[1, 2, 3], logprobs=Logprobs.from_list([-1.0]).data)
    assert held.ids.to_list() == [1, 2, 3]
    assert held.model_dump()["ids"] == TokenIds.from_list([1, 2, 3]).data
    assert held.model_dump(mode="json") == {"ids": [1, 2, 3], "logprobs": [-1.0]}
    assert _Holder.model_validate_json(held.model_dump_json()) == held


def test_pydantic_rejects_other_types() -> None:
    with pytest.raises(ValueError, match="TokenIds expects bytes or a list"):
        _Holder(ids="1 2 3", logprobs=[])


def test_repr_is_short() -> None:
    text = repr(TokenIds.from_list(range(100)))
    assert text.startswith("TokenIds([0, 1, 2") and "n=100" in text and len(text) < 80
    assert not math.isnan(Logprobs.from_list([0.0])[0])
