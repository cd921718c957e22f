"""The faithfulness checker finds planted violations, each reported, with its position."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.checker import Violation, check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, prefix_merge, tree
from rollstream.schemas import Logprobs, LossMask, Segment
from tests.consumers.reconstruct.sessions import GeneratedSession, build_session, sessions

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def merged(events: list[str], seed: int = 0) -> tuple[list[Segment], dict[str, ResolvedCall]]:
    calls = build_session(events, seed).resolved()
    segments = prefix_merge(calls, StrategyContext()).segments
    return segments, {c.call_id: c for c in calls}


def with_list(segment: Segment, field: str, index: int, value: float) -> Segment:
    array = getattr(segment, field)
    values = array.to_list()
    values[index] = value
    return segment.model_copy(update={field: type(array).from_list(values)})


def kinds(violations: list[Violation]) -> set[str]:
    return {v.kind for v in violations}


def first_span(segment: Segment, calls: dict[str, ResolvedCall]) -> tuple[int, int]:
    call = calls[segment.call_ids[0]]
    assert call.prompt is not None and call.completion is not None
    return len(call.prompt), len(call.prompt) + len(call.completion)


def test_a_faithful_trajectory_passes() -> None:
    segments, calls = merged(["turn", "parallel", "side", "turn"])
    assert check_segments(segments, calls) == []


def test_flipped_prompt_token_is_a_prompt_mismatch_for_every_call_after_it() -> None:
    segments, calls = merged(["turn", "turn"])
    segment = segments[0]
    ids = segment.input_ids.to_list()
    bad = with_list(segment, "input_ids", 5, ids[5] + 1)
    violations = check_segments([bad], calls)
    assert {v.kind for v in violations} == {"prompt_mismatch"}
    assert [v.call_id for v in violations] == segment.call_ids  # each call, not just the first
    assert {v.position for v in violations} == {5} and {v.segment for v in violations} == {0}


def test_flipped_completion_token() -> None:
    segments, calls = merged(["turn"])
    start, _ = first_span(segments[0], calls)
    bad = with_list(segments[0], "input_ids", start + 1, 4_000_000)
    violations = check_segments([bad], calls)
    assert ("completion_mismatch", start + 1) in {(v.kind, v.position) for v in violations}
    # Later calls' prompts contain that token too.
    assert "prompt_mismatch" in kinds(violations)


def test_mask_bits() -> None:
    segments, calls = merged(["turn"])
    start, _ = first_span(segments[0], calls)
    unmasked = with_list(segments[0], "loss_mask", start, 0)
    assert [(v.kind, v.position) for v in check_segments([unmasked], calls)] == [
        ("sampled_not_masked", start)
    ]
    masked = with_list(segments[0], "loss_mask", 2, 1)
    assert [(v.kind, v.position, v.call_id) for v in check_segments([masked], calls)] == [
        ("mask_not_sampled", 2, None)
    ]
    masked_run = masked.model_copy(
        update={"loss_mask": LossMask.from_list([1] * len(masked.loss_mask))}
    )
    runs = [v for v in check_segments([masked_run], calls) if v.kind == "mask_not_sampled"]
    assert runs[0].position == 0 and runs[0].detail.startswith(f"{start} token(s)")
    assert len(runs) == len(segments[0].call_ids)  # each context run before a completion


def test_logprob_changed() -> None:
    segments, calls = merged(["turn"])
    _, end = first_span(segments[0], calls)
    bad = with_list(segments[0], "logprobs", end - 1, 0.5)
    assert [(v.kind, v.position) for v in check_segments([bad], calls)] == [
        ("logprob_mismatch", end - 1)
    ]


def test_a_call_without_logprobs_expects_nan_and_comparison_is_float32() -> None:
    # A missing logprob is NaN (0.0 would claim probability 1); NaNs match whatever their bits.
    calls = build_session(["no_logprobs"]).resolved()
    segments = prefix_merge(calls, StrategyContext()).segments
    by_id = {c.call_id: c for c in calls}
    start, end = first_span(segments[0], by_id)
    assert all(math.isnan(v) for v in segments[0].logprobs.to_list()[start:end])
    data = bytearray(segments[0].logprobs.data)
    data[start * 4 : end * 4] = b"\x01\x00\xc0\xff" * (end - start)  # another NaN's bits
    other_nan = segments[0].model_copy(update={"logprobs": Logprobs(bytes(data))})
    assert check_segments([other_nan], by_id) == []
    zero = with_list(segments[0], "logprobs", start, 0.0)
    assert [(v.kind, v.position) for v in check_segments([zero], by_id)] == [
        ("logprob_mismatch", start)
    ]


def test_unknown_repeated_and_tokenless_calls() -> None:
    segments, calls = merged(["no_tokens"])
    tokenless = next(c for c in calls.values() if not c.has_tokens)
    segment = segments[0]
    claimed = segment.model_copy(
        update={"call_ids": [*segment.call_ids, "call-ghost", tokenless.call_id]}
    )
    violations = check_segments([claimed, segment], calls)
    got = {(v.segment, v.kind, v.call_id) for v in violations}
    assert (0, "unknown_call", "call-ghost") in got
    assert (0, "call_without_tokens", tokenless.call_id) in got
    assert {(1, "repeated_call", i) for i in segment.call_ids} <= got


def test_a_segment_too_short_for_its_call() -> None:
    segments, calls = merged(["turn"])
    start, _ = first_span(segments[0], calls)
    n = start + 2
    short = Segment(
        input_ids=segments[0].input_ids[:n],
        loss_mask=segments[0].loss_mask[:n],
        logprobs=segments[0].logprobs[:n],
        call_ids=segments[0].call_ids,
    )
    violations = check_segments([short], calls)
    assert ("completion_mismatch", 0) in {(v.kind, v.segment) for v in violations}
    assert "prompt_mismatch" in kinds(violations)  # the later calls' prompts run past the end


def test_a_call_claimed_in_a_segment_it_does_not_fit() -> None:
    segments, calls = merged(["turn", "side", "turn"])
    main, side = segments[0], segments[1]
    wrong = side.model_copy(update={"call_ids": [main.call_ids[0]]})
    got = kinds(check_segments([main, wrong], calls))
    assert "repeated_call" in got and "prompt_mismatch" in got


@PROPERTY
@given(sessions(), st.data())
def test_any_flipped_token_or_mask_bit_is_found(
    session: GeneratedSession, data: st.DataObject
) -> None:
    calls = {c.call_id: c for c in session.resolved()}
    for strategy in (prefix_merge, tree):
        segments = strategy(list(calls.values()), StrategyContext()).segments
        index = data.draw(st.integers(0, len(segments) - 1))
        segment = segments[index]
        position = data.draw(st.integers(0, len(segment.input_ids) - 1))
        token = segment.input_ids[position]
        flipped = with_list(segment, "input_ids", position, token + 1)
        found = check_segments([*segments[:index], flipped, *segments[index + 1 :]], calls)
        assert found and {v.segment for v in found} == {index}
        assert min(v.position for v in found if v.position is not None) == position
        bit = segment.loss_mask[position]
        masked = with_list(segment, "loss_mask", position, 1 - bit)
        found = check_segments([*segments[:index], masked, *segments[index + 1 :]], calls)
        assert [v.kind for v in found] == ["sampled_not_masked" if bit else "mask_not_sampled"]
