"""The token strategies on generated sessions: invariant, counts, merges and breaks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import (
    STRATEGIES,
    Strategy,
    StrategyContext,
    StrategyResult,
    per_call,
    prefix_merge,
    prompt_prefix_merge,
    tree,
)
from rollstream.consumers.reconstruct.strategies.base import MISSING_LOGPROB
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Segment, TokenIds
from tests.consumers.reconstruct.sessions import (
    ALL_EVENTS,
    LINEAR_EVENTS,
    THINK,
    GeneratedSession,
    build_session,
    sessions,
)

FAITHFUL: dict[str, Strategy] = {
    "per_call": per_call,
    "prefix_merge": prefix_merge,
    "tree": tree,
}
TOKEN_STRATEGIES: dict[str, Strategy] = {**FAITHFUL, "prompt_prefix_merge": prompt_prefix_merge}
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(strategy: Strategy, session: GeneratedSession, reported: int = 0) -> StrategyResult:
    return strategy(session.resolved(), StrategyContext(calls_reported=reported))


def by_id(session: GeneratedSession) -> dict[str, ResolvedCall]:
    return {call.call_id: call for call in session.resolved()}


def placed(segments: Sequence[Segment]) -> list[str]:
    return [call_id for segment in segments for call_id in segment.call_ids]


def trainable(segments: Sequence[Segment]) -> int:
    return sum(segment.trainable_tokens for segment in segments)


def completion_tokens(session: GeneratedSession) -> int:
    calls = by_id(session)
    return sum(len(calls[i].completion or ()) for i in session.used_ids)


# Properties over every kind of session ----------------------------------------------------


@PROPERTY
@given(sessions())
def test_faithful_strategies_have_no_violations(session: GeneratedSession) -> None:
    calls = by_id(session)
    for name, strategy in FAITHFUL.items():
        result = run(strategy, session)
        assert check_segments(result.segments, calls) == [], name
        assert not result.stats.invariant_relaxed


@PROPERTY
@given(sessions())
def test_every_used_call_is_placed_exactly_once(session: GeneratedSession) -> None:
    for name, strategy in TOKEN_STRATEGIES.items():
        result = run(strategy, session)
        assert sorted(placed(result.segments)) == sorted(session.used_ids), name


@PROPERTY
@given(sessions())
def test_stats_count_what_was_planted(session: GeneratedSession) -> None:
    planted = session.planted
    for name, strategy in TOKEN_STRATEGIES.items():
        stats = run(strategy, session, reported=len(session.planned) + 1).stats
        assert stats.calls == len(session.planned), name
        assert stats.calls_reported == len(session.planned) + 1
        assert stats.failed_calls == planted.failed
        assert stats.calls_without_tokens == planted.without_tokens
        expected_reasons = (
            {"no_token_ids": planted.without_tokens} if planted.without_tokens else {}
        )
        assert stats.missing_token_reasons == expected_reasons
        assert stats.duplicate_calls == planted.duplicates
        assert stats.calls_used == len(session.used_ids)
        assert (
            stats.calls
            == stats.failed_calls
            + stats.superseded_calls
            + stats.calls_without_tokens
            + stats.duplicate_calls
            + stats.calls_used
        )
        has_note = any("without logprobs" in note for note in stats.notes)
        assert has_note == ("no_logprobs" in planted.events)


@PROPERTY
@given(sessions())
def test_merging_strategies_account_for_every_segment(session: GeneratedSession) -> None:
    for name in ("prefix_merge", "tree", "prompt_prefix_merge"):
        result = run(TOKEN_STRATEGIES[name], session)
        stats = result.stats
        assert len(result.segments) == stats.breaks + 1, name
        assert sum(stats.break_reasons.values()) == stats.breaks
        assert stats.merges == stats.calls_used - len(result.segments)


@PROPERTY
@given(sessions(events=LINEAR_EVENTS))
def test_prefix_merge_keeps_a_drift_free_session_in_one_segment(
    session: GeneratedSession,
) -> None:
    result = run(prefix_merge, session)
    assert len(result.segments) == 1
    assert result.stats.breaks == 0 and result.stats.merges == len(session.used_ids) - 1
    assert result.segments[0].call_ids == session.used_ids


@PROPERTY
@given(sessions())
def test_tree_never_trains_a_token_twice(session: GeneratedSession) -> None:
    result = run(tree, session)
    assert trainable(result.segments) == completion_tokens(session)
    for index, segment in enumerate(result.segments):
        if segment.parent is None:
            continue
        assert 0 <= segment.parent < index
        parent = result.segments[segment.parent]
        assert segment.input_ids.common_prefix_len(parent.input_ids) > 0


@PROPERTY
@given(sessions())
def test_prompt_prefix_merge_keeps_each_sampled_completion_once(
    session: GeneratedSession,
) -> None:
    calls = by_id(session)
    result = run(prompt_prefix_merge, session)
    assert result.stats.invariant_relaxed
    assert any("relaxes the faithfulness invariant" in note for note in result.stats.notes)
    assert trainable(result.segments) == completion_tokens(session)
    for segment in result.segments:
        sampled = [k for k, m in enumerate(segment.loss_mask.to_list()) if m]
        ids, logprobs = segment.input_ids.to_list(), segment.logprobs.data
        want_ids: list[int] = []
        want_logprobs = b""  # packed: a missing logprob is NaN, which equals nothing as a float
        for call_id in segment.call_ids:
            call = calls[call_id]
            assert call.completion is not None
            want_ids += call.completion.to_list()
            want_logprobs += (
                call.logprobs.data
                if call.logprobs is not None
                else MISSING_LOGPROB * len(call.completion)
            )
        assert [ids[k] for k in sampled] == want_ids
        assert b"".join(logprobs[4 * k : 4 * k + 4] for k in sampled) == want_logprobs


@PROPERTY
@given(sessions(events=tuple(e for e in ALL_EVENTS if e != "drift")))
def test_prompt_prefix_merge_equals_prefix_merge_without_drift(
    session: GeneratedSession,
) -> None:
    # Splicing only matters where a prompt re-rendered a sampled turn differently.
    assert run(prompt_prefix_merge, session).segments == run(prefix_merge, session).segments


@PROPERTY
@given(sessions())
def test_per_call_is_one_segment_per_used_call(session: GeneratedSession) -> None:
    result = run(per_call, session)
    assert [s.call_ids for s in result.segments] == [[i] for i in session.used_ids]
    assert result.stats.merges == 0 and result.stats.breaks == 0


@pytest.mark.parametrize("name", sorted(TOKEN_STRATEGIES))
def test_no_calls_no_segments(name: str) -> None:
    result = STRATEGIES[name]([], StrategyContext(calls_reported=3))
    assert result.segments == []
    assert result.stats.calls == 0 and result.stats.calls_reported == 3


# Break reasons, one event at a time -------------------------------------------------------


def reasons(strategy: Strategy, events: list[str], seed: int = 1) -> dict[str, int]:
    return run(strategy, build_session(events, seed)).stats.break_reasons


@pytest.mark.parametrize("seed", range(5))
def test_drift_breaks_prefix_merge_but_not_polar(seed: int) -> None:
    assert reasons(prefix_merge, ["turn", "drift", "turn"], seed) == {"drift": 1}
    assert reasons(tree, ["turn", "drift", "turn"], seed) == {"drift": 1}
    assert reasons(prompt_prefix_merge, ["turn", "drift", "turn"], seed) == {}


@pytest.mark.parametrize("seed", range(5))
def test_cut_truncation_is_classified(seed: int) -> None:
    for strategy in (prefix_merge, tree, prompt_prefix_merge):
        assert reasons(strategy, ["turn", "truncated_cut"], seed) == {"truncated": 1}
    # A truncated turn the template closes as it was sampled still extends the segment.
    assert reasons(prefix_merge, ["truncated_closed", "turn"], seed) == {}


def test_resample_is_a_retry() -> None:
    for strategy in (prefix_merge, tree, prompt_prefix_merge):
        assert reasons(strategy, ["turn", "resample"]) == {"retry": 1}


def test_side_call_does_not_break_the_main_thread() -> None:
    session = build_session(["turn", "side", "turn", "turn"], seed=3)
    result = run(prefix_merge, session)
    assert len(result.segments) == 2 and result.stats.break_reasons == {"edited_history": 1}
    main, side = result.segments
    # The main thread resumed its own segment after the side conversation.
    assert main.call_ids == [i for i in session.used_ids if i not in side.call_ids]
    assert main.call_ids[0] == session.used_ids[0] and main.call_ids[-1] == session.used_ids[-1]
    assert side.call_ids and len(main.call_ids) == 4
    tree_result = run(tree, session)
    assert tree_result.stats.break_reasons == {"branch": 1}
    assert [s.parent for s in tree_result.segments] == [None, 0]


def test_subagents_branch() -> None:
    session = build_session(["turn", "subagent", "turn"], seed=4)
    merged = run(prefix_merge, session)
    assert merged.stats.break_reasons == {"edited_history": 1}
    branched = run(tree, session)
    assert branched.stats.break_reasons == {"branch": 1}
    assert [s.parent for s in branched.segments] == [None, 0]


def test_failed_retried_and_tokenless_calls_are_left_out() -> None:
    session = build_session(["failed", "cancelled", "retry_identical", "no_tokens"], seed=5)
    stats = run(prefix_merge, session).stats
    assert stats.failed_calls == 2 and stats.duplicate_calls == 1
    assert stats.calls_without_tokens == 1 and stats.missing_token_reasons == {"no_token_ids": 1}
    assert stats.breaks == 0


def test_polar_splices_after_a_turn_rendered_verbatim_even_when_truncated() -> None:
    # After a drift splice the chain never again matches the prompts exactly; a cut-off turn
    # the template merely closed is still found verbatim after its prompt.
    events = ["turn", "drift", "truncated_closed"]
    assert reasons(prefix_merge, events) == {"drift": 1}
    assert reasons(prompt_prefix_merge, events) == {}


def test_polar_checks_the_end_of_turn_token_against_the_tokenizer(
    tokenizer: ChatTokenizer,
) -> None:
    calls = build_session(["drift", "turn"], seed=1).resolved()
    first = calls[0]
    assert first.completion is not None and first.logprobs is not None
    assert first.completion[0] == THINK  # this seed's drift strips reasoning from the history
    # Cut before its end-of-turn token, the completion ends with the tool-call closing tag,
    # which the re-rendered turn also contains: only the tokenizer knows it is no stop token.
    calls[0] = dataclasses.replace(
        first, completion=first.completion[:-1], logprobs=first.logprobs[:-1]
    )
    assert prompt_prefix_merge(calls, StrategyContext()).stats.breaks == 0
    with_tokenizer = prompt_prefix_merge(calls, StrategyContext(tokenizer))
    assert with_tokenizer.stats.break_reasons == {"unspliceable": 1}
    # The real tokenizer's end-of-turn id is the toy template's EOS: unmodified, it splices.
    assert prompt_prefix_merge([first, *calls[1:]], StrategyContext(tokenizer)).stats.breaks == 0


@pytest.mark.parametrize("finish", ["stop", "content_filter"])
def test_unspliceable_when_the_previous_turn_did_not_end_with_its_stop_token(
    finish: str,
) -> None:
    calls = build_session(["drift", "turn"], seed=6).resolved()
    first = calls[0]
    assert first.completion is not None
    # Stopped on a stop string (its last token appears nowhere later) or for another reason.
    completion = first.completion[:-1] + TokenIds.from_list([99_999])
    calls[0] = dataclasses.replace(first, completion=completion, finish_reason=finish)
    result = prompt_prefix_merge(calls, StrategyContext())
    assert result.stats.break_reasons == {"unspliceable": 1}
