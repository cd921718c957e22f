"""Delta-encoded prompts: encoding picks the best base, resolution restores the prompt exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.errors import SerializationError
from rollstream.schemas import PromptTokens, TokenIds, encode_prompt, resolve_prompt

tokens = st.lists(st.integers(min_value=0, max_value=50), max_size=120).map(TokenIds.from_list)


@given(
    prompt=tokens,
    contexts=st.lists(tokens, max_size=4),
    min_shared=st.integers(min_value=1, max_value=20),
)
def test_encode_then_resolve_is_identity(
    prompt: TokenIds, contexts: list[TokenIds], min_shared: int
) -> None:
    candidates = [(f"c{i}", c) for i, c in enumerate(contexts)]
    encoded = encode_prompt(prompt, candidates, min_shared=min_shared)
    assert resolve_prompt(encoded, dict(candidates).get) == prompt
    if encoded.base_call_id is not None:
        assert encoded.shared_len >= min_shared
        best = max(prompt.common_prefix_len(c) for c in contexts)
        assert encoded.shared_len == best


def test_extending_prompt_carries_only_the_new_tokens() -> None:
    context = TokenIds.from_list(range(1000))
    prompt = context + TokenIds.from_list([7, 8, 9])
    encoded = encode_prompt(prompt, [("c0", context)])
    assert encoded == PromptTokens(base_call_id="c0", shared_len=1000, suffix=[7, 8, 9])


def test_short_overlap_is_written_in_full() -> None:
    prompt = TokenIds.from_list([1, 2, 3, 4])
    encoded = encode_prompt(prompt, [("c0", TokenIds.from_list([1, 2, 9]))])
    assert encoded.is_full and encoded.suffix == prompt


def test_unknown_base_is_an_error() -> None:
    with pytest.raises(SerializationError, match="unknown"):
        resolve_prompt(PromptTokens(base_call_id="gone", shared_len=1, suffix=[]), {}.get)  # type: ignore[arg-type]


def test_base_shorter_than_shared_len_is_an_error() -> None:
    prompt = PromptTokens(base_call_id="c0", shared_len=5, suffix=[])
    with pytest.raises(SerializationError, match="has only 2"):
        resolve_prompt(prompt, {"c0": TokenIds.from_list([1, 2])}.get)


def test_shared_len_without_base_is_invalid() -> None:
    with pytest.raises(ValueError, match="needs a base_call_id"):
        PromptTokens(shared_len=3, suffix=[])
