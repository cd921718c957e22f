"""Retries are not branches: an attempt the harness sent again is marked, not trained."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rollstream.consumers.reconstruct.calls import resolve_calls, retried_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.schemas import CallRecord, CallStatus, CallTimings
from tests.consumers.reconstruct.sessions import PlannedCall, to_records
from tests.schemas.samples import T0

PROMPT = list(range(100, 130))


def _timed(record: CallRecord, start: float, end: float, repeats: str | None = None) -> CallRecord:
    timings = CallTimings(
        started_at=T0 + timedelta(seconds=start), ended_at=T0 + timedelta(seconds=end)
    )
    return record.model_copy(update={"timings": timings, "repeats": repeats})


def _session(first: CallStatus, retry_starts: float) -> list[CallRecord]:
    """A first attempt (answered X, or failed), its retry (answered Y), and the turn after Y."""
    answer = [1000, 1001, 1002]
    retried = [2000, 2001, 2002, 2003]
    planned = [
        PlannedCall("a0", PROMPT, answer, [-0.5] * 3, "stop", first),
        PlannedCall("a1", PROMPT, retried, [-0.25] * 4, "stop", CallStatus.OK),
        PlannedCall("b", [*PROMPT, *retried, 7, 8], [3000], [-0.1], "stop", CallStatus.OK),
    ]
    a0, a1, b = to_records(planned, min_shared=1)
    return [_timed(a0, 0, 1), _timed(a1, retry_starts, 3, repeats="a0"), _timed(b, 4, 5)]


@pytest.mark.parametrize("strategy", ["prefix_merge", "tree", "per_call"])
def test_an_answered_attempt_the_harness_sent_again_is_superseded(strategy: str) -> None:
    calls = resolve_calls(_session(CallStatus.OK, retry_starts=2))
    assert [c.superseded_by for c in calls] == ["a1", None, None]
    rebuilt = get_strategy(strategy)(calls, StrategyContext())
    assert rebuilt.stats.superseded_calls == 1 and rebuilt.stats.calls_used == 2
    assert check_segments(rebuilt.segments, {c.call_id: c for c in calls}) == []
    # Only the retry's and the next turn's answers are trained: the orphan's tokens are not.
    trainable = sum(s.trainable_tokens for s in rebuilt.segments)
    assert trainable == 4 + 1
    if strategy == "prefix_merge":  # the thread goes on unbroken from the retry
        assert len(rebuilt.segments) == 1 and rebuilt.stats.breaks == 0


def test_a_failed_attempt_is_marked_and_stays_counted_as_failed() -> None:
    calls = resolve_calls(_session(CallStatus.ERROR, retry_starts=2))
    assert calls[0].superseded_by == "a1"
    stats = get_strategy("prefix_merge")(calls, StrategyContext()).stats
    assert (stats.failed_calls, stats.superseded_calls, stats.calls_used) == (1, 0, 2)


def test_the_same_request_sent_while_the_first_ran_is_a_second_sample() -> None:
    calls = resolve_calls(_session(CallStatus.OK, retry_starts=0.5))  # before a0 ended
    assert [c.superseded_by for c in calls] == [None, None, None]
    stats = get_strategy("tree")(calls, StrategyContext()).stats
    assert (stats.superseded_calls, stats.calls_used) == (0, 3)


def test_a_retry_of_a_retry_supersedes_it_and_unknown_or_later_calls_are_ignored() -> None:
    a0, a1, b = _session(CallStatus.ERROR, retry_starts=2)
    a2 = _timed(a1.model_copy(update={"call_id": "a2", "seq": 5}), 6, 7, repeats="a1")
    stray = _timed(b.model_copy(update={"call_id": "s", "seq": 6}), 8, 9, repeats="lost")
    backwards = _timed(b.model_copy(update={"call_id": "z", "seq": 7}), 0, 0.5, repeats="b")
    assert retried_calls([a0, a1, b, a2, stray, backwards]) == {"a0": "a1", "a1": "a2"}
