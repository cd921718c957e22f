"""Delta chains of any length and shape resolve iteratively: prompts and requests alike."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.errors import SerializationError
from rollstream.schemas import (
    ApiKind,
    CallRecord,
    CallTimings,
    PromptTokens,
    TokenIds,
    compress_json,
)
from rollstream.schemas.calls import SessionRequests
from rollstream.schemas.prompts import SessionPrompts
from rollstream.schemas.requests import RequestBase, delta_request
from tests.schemas.samples import T0

# A session's shape: for each call after the first, (which earlier call is its base, how much
# of the base it shares as a fraction, how many new items it adds).
Step = tuple[int, float, int]
steps = st.lists(
    st.tuples(st.integers(min_value=0), st.floats(0.0, 1.0), st.integers(0, 5)), max_size=40
)


def _tokens(call: int, n: int) -> list[int]:
    return [(call * 7919 + k) % 1000 for k in range(n)]


@settings(max_examples=60, deadline=None)
@given(steps=steps, cache_size=st.integers(1, 4), order=st.randoms(use_true_random=False))
def test_prompts_resolve_in_any_order_whatever_the_cache(
    steps: list[Step], cache_size: int, order: Any
) -> None:
    # Every prompt shares part of an earlier call's context (a tree of branches, retries,
    # rollbacks), read back in a random order through a tiny cache: always the same tokens.
    prompts = SessionPrompts(cache_size=cache_size)
    expected: dict[str, list[int]] = {}
    contexts: list[list[int]] = []
    for i, step in enumerate([(0, 0.0, 3), *steps]):
        base, fraction, new = step
        call_id = f"c{i}"
        completion = _tokens(i, 2)
        if i == 0:
            encoded, full = (
                PromptTokens(suffix=TokenIds.from_list(_tokens(i, new))),
                _tokens(i, new),
            )
        else:
            base %= i
            shared = int(len(contexts[base]) * fraction)
            suffix = _tokens(i + 1000, new)
            full = contexts[base][:shared] + suffix
            encoded = PromptTokens(
                base_call_id=f"c{base}", shared_len=shared, suffix=TokenIds.from_list(suffix)
            )
        assert prompts.add(call_id, encoded, TokenIds.from_list(completion)) == len(full)
        expected[call_id] = full
        contexts.append(full + completion)
    ids = list(expected)
    order.shuffle(ids)
    for call_id in ids:
        assert prompts.prompt(call_id).to_list() == expected[call_id]
        index = int(call_id[1:])
        assert prompts.context(call_id).to_list() == contexts[index]


def test_a_prompt_chain_of_thousands_of_calls_resolves_from_its_root() -> None:
    # Nothing cached: the last prompt is replayed from the root along 5,000 steps.
    prompts = SessionPrompts(cache_size=1)
    prompts.add("c0", PromptTokens(suffix=TokenIds.from_list([1, 2])), TokenIds.from_list([3]))
    expected = [1, 2, 3]
    for i in range(1, 5000):
        prompts.add(
            f"c{i}",
            PromptTokens(
                base_call_id=f"c{i - 1}",
                shared_len=len(expected),
                suffix=TokenIds.from_list([i % 1000]),
            ),
            TokenIds.from_list([7]),
        )
        expected += [i % 1000, 7]
    assert prompts.context("c4999").to_list() == expected
    assert prompts.prompt("c0").to_list() == [1, 2]


def test_a_prompt_base_must_be_known_and_long_enough() -> None:
    prompts = SessionPrompts()
    prompts.add("c0", PromptTokens(suffix=TokenIds.from_list([1, 2])), TokenIds.from_list([3]))
    with pytest.raises(SerializationError, match="unknown"):
        prompts.add("c1", PromptTokens(base_call_id="nope", shared_len=1), None)
    with pytest.raises(SerializationError, match="only 3"):
        prompts.add("c1", PromptTokens(base_call_id="c0", shared_len=4), None)
    with pytest.raises(SerializationError, match="twice"):
        prompts.add("c0", PromptTokens(), None)


def _record(call_id: str, seq: int, rest: dict[str, Any], spec: RequestBase | None) -> CallRecord:
    return CallRecord(
        call_id=call_id,
        session_id="s",
        seq=seq,
        api=ApiKind.CHAT_COMPLETIONS,
        model="m",
        harness_request=compress_json(rest),
        upstream_request=compress_json(rest),
        harness_request_base=spec,
        upstream_request_base=spec,
        timings=CallTimings(started_at=T0),
    )


def _session(steps: list[Step]) -> tuple[list[CallRecord], list[dict[str, Any]]]:
    """Requests whose conversations branch off earlier ones, each delta-encoded on its base."""
    requests: list[dict[str, Any]] = []
    records: list[CallRecord] = []
    for i, (base, fraction, new) in enumerate([(0, 0.0, 2), *steps]):
        items = [{"role": "user", "content": f"{i}-{k}"} for k in range(new)]
        if i == 0:
            request: dict[str, Any] = {"model": "m", "tools": ["t"], "messages": items}
            records.append(_record("c0", 0, request, None))
        else:
            base %= i
            head = requests[base]["messages"]
            request = {**requests[base], "messages": head[: int(len(head) * fraction)] + items}
            found = delta_request(request, f"c{base}", requests[base])
            assert found is not None  # "model" and "tools" are always unchanged
            records.append(_record(f"c{i}", i, *found))
        requests.append(request)
    return records, requests


@settings(max_examples=60, deadline=None)
@given(steps=steps, cache_size=st.integers(1, 4), order=st.randoms(use_true_random=False))
def test_requests_resolve_in_any_order_whatever_the_cache(
    steps: list[Step], cache_size: int, order: Any
) -> None:
    records, requests = _session(steps)
    resolved = SessionRequests(records, cache_size=cache_size)
    indexes = list(range(len(records)))
    order.shuffle(indexes)
    for i in indexes:
        assert resolved.harness(f"c{i}") == requests[i]
        assert resolved.upstream(f"c{i}") == requests[i]
    # What was handed out is not changed by resolving others after it.
    first = resolved.harness(f"c{indexes[0]}")
    for i in indexes:
        resolved.harness(f"c{i}")
    assert first == requests[indexes[0]]


def test_a_request_chain_of_3000_calls_resolves_without_recursion() -> None:
    # Was: one Python frame per base call, RecursionError past ~1,000 calls.
    records, requests = _session([(i, 1.0, 2) for i in range(2999)])
    assert len(records) == 3000
    assert SessionRequests(records).upstream("c2999") == requests[-1]
    assert len(requests[-1]["messages"]) == 6000


def test_a_looping_request_chain_is_refused() -> None:
    records, _ = _session([(0, 1.0, 1), (1, 1.0, 1)])
    looped = records[0].model_copy(
        update={"harness_request_base": RequestBase(base_call_id="c2", unchanged=["model"])}
    )
    with pytest.raises(SerializationError, match="loop"):
        SessionRequests([looped, *records[1:]]).harness("c2")
