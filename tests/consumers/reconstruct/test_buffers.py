"""Session buffers: readiness, the safe commit offset, and skipping what was emitted."""

from __future__ import annotations

import pytest

from rollstream.consumers.reconstruct.buffers import PartitionBuffers, Taken, build_trajectory
from rollstream.consumers.reconstruct.service import Reconstructor
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.consumers.reconstruct.strategies import get_strategy
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.errors import ConfigurationError
from rollstream.schemas import SessionEnded, SessionStatus
from rollstream.schemas.sessions import HANDED_BACK, SUPERSEDED
from rollstream.schemas.trajectories import TrajectoryStatus
from rollstream.settings import KafkaSettings
from tests.schemas.samples import SCORED

SHAPE = SyntheticShape(turns=2, system_tokens=8, tool_result_tokens=4, completion_tokens=4)


def test_complete_session_is_ready_at_once_and_the_commit_moves_past_it() -> None:
    a = synthetic_session("a", SHAPE).records  # Started, call, call, Ended
    buffers = PartitionBuffers(committed=0)
    for offset, record in enumerate(a[:-1]):
        buffers.add(offset, record, at=0.0)
        assert buffers.ready(0.0, wait_s=5, idle_s=60) == []
    assert buffers.commit_offset() == 0  # a is open: its records must be re-read after a crash
    buffers.add(3, a[-1], at=1.0)
    [(buffer, status)] = buffers.ready(1.0, wait_s=5, idle_s=60)
    assert status is TrajectoryStatus.COMPLETE and len(buffer.calls) == 2
    buffers.mark_emitted("a")
    assert buffers.commit_offset() == 4


def test_commit_stops_at_the_oldest_open_session_and_the_state_keeps_what_lies_past_it() -> None:
    a = synthetic_session("a", SHAPE).records
    b = synthetic_session("b", SHAPE).records
    buffers = PartitionBuffers(committed=0)
    # a starts first but b ends first.
    order = [a[0], b[0], b[1], b[2], b[3], a[1]]
    for offset, record in enumerate(order):
        buffers.add(offset, record, at=0.0)
    [(ready, _)] = buffers.ready(0.0, 5, 60)
    assert ready.session_id == "b"
    buffers.mark_emitted("b")
    assert buffers.commit_offset() == 0
    state = buffers.state()
    assert state["committed"] == 0 and state["emitted"] == {"b": 4}

    # A new owner re-reads from offset 0: b is skipped, a completes, nothing is emitted twice.
    again = PartitionBuffers.from_state(state, committed=0)
    for offset, record in enumerate([*order, a[2], a[3]]):
        again.add(offset, record, at=0.0)
    assert [s.session_id for s, _ in again.ready(0.0, 5, 60)] == ["a"]
    again.mark_emitted("a")
    assert again.commit_offset() == 8
    assert again.state()["emitted"] == {}  # everything is behind the commit now: pruned


def test_missing_calls_wait_then_incomplete_and_silence_is_abandoned() -> None:
    records = synthetic_session("a", SHAPE).records
    ended = records[-1]
    assert isinstance(ended, SessionEnded) and ended.call_count == 2
    buffers = PartitionBuffers(committed=0)
    buffers.add(0, records[0], at=0.0)
    buffers.add(1, records[1], at=0.0)  # one call of two
    buffers.add(2, ended, at=10.0)
    assert buffers.ready(12.0, wait_s=5, idle_s=60) == []
    [(_, status)] = buffers.ready(15.0, wait_s=5, idle_s=60)
    assert status is TrajectoryStatus.INCOMPLETE

    silent = PartitionBuffers(committed=0)
    silent.add(0, records[0], at=0.0)
    assert silent.ready(59.0, 5, 60) == []
    assert silent.ready(60.0, 5, 60)[0][1] is TrajectoryStatus.ABANDONED


def test_duplicates_and_late_calls() -> None:
    records = synthetic_session("a", SHAPE).records
    buffers = PartitionBuffers(committed=0)
    for offset, record in enumerate([records[0], records[1], records[1], records[2], records[3]]):
        buffers.add(offset, record, at=0.0)
    [(buffer, status)] = buffers.ready(0.0, 5, 60)
    assert len(buffer.calls) == 2 and status is TrajectoryStatus.COMPLETE  # a re-sent call once
    buffers.mark_emitted("a")
    buffers.add(5, records[2], at=1.0)  # a call arriving after the emission
    assert buffers.late_records == 1 and buffers.ready(100.0, 5, 60) == []
    # Nothing to skip on a re-read, which starts past it; still dropped if more straggle in.
    assert buffers.state() == {"version": 1, "committed": 6, "emitted": {}}
    buffers.add(6, records[1], at=2.0)
    assert buffers.late_records == 2 and buffers.ready(1e9, 5, 60) == []
    buffers.skip(7)
    assert buffers.commit_offset() == 8


def test_deadlines_follow_the_records_times_so_a_reread_reaches_the_same_ones() -> None:
    """A new owner re-reading a silent session's records abandons it when its first owner would.

    The session's last record is from time 100; its first owner stopped at 159 (silent 59 s of
    60). The next owner re-reads the record at 160: the session is abandoned then, not 60 s
    after the re-read (the deadline is the record's time plus the idle timeout).
    """
    records = synthetic_session("a", SHAPE).records
    first = PartitionBuffers(committed=0)
    assert first.add(0, records[0], at=100.0) is Taken.BUFFERED
    first.advance(159.0)
    assert first.ready(None, wait_s=5, idle_s=60) == []  # silent 59 s of 60
    assert first.commit_offset() == 0

    again = PartitionBuffers.from_state(first.state(), committed=0)
    again.add(0, records[0], at=100.0)
    assert again.ready(None, wait_s=5, idle_s=60) == []  # its clock: the record's time
    again.advance(160.0)  # read to the partition's end: the wall clock
    [(buffer, status)] = again.ready(None, wait_s=5, idle_s=60)
    assert buffer.session_id == "a" and status is TrajectoryStatus.ABANDONED


def test_reading_a_backlog_abandons_nothing_whose_later_records_are_still_ahead() -> None:
    """Until the partition is read to its end, its clock is the newest record's time."""
    records = synthetic_session("a", SHAPE).records
    ended = records[-1]
    assert isinstance(ended, SessionEnded)
    buffers = PartitionBuffers(committed=0)
    buffers.add(0, records[0], at=1000.0)  # recorded an hour before it is read
    buffers.add(1, records[1], at=1010.0)
    assert buffers.clock == 1010.0 and buffers.ready(None, wait_s=5, idle_s=60) == []
    buffers.add(2, records[2], at=1065.0)  # 55 s later in the records: still not idle
    assert buffers.ready(None, 5, 60) == []
    buffers.add(3, ended, at=1066.0)
    [(_, status)] = buffers.ready(None, 5, 60)
    assert status is TrajectoryStatus.COMPLETE
    buffers.advance(900.0)  # the clock never goes back
    assert buffers.clock == 1066.0


def test_the_wait_after_session_ended_counts_from_the_ended_record() -> None:
    records = synthetic_session("a", SHAPE).records
    buffers = PartitionBuffers(committed=0)
    buffers.add(0, records[0], at=0.0)
    buffers.add(1, records[1], at=1.0)  # one call of two
    buffers.add(2, records[-1], at=2.0)
    buffers.advance(6.9)
    assert buffers.ready(None, wait_s=5, idle_s=60) == []
    buffers.advance(7.0)
    assert buffers.ready(None, wait_s=5, idle_s=60)[0][1] is TrajectoryStatus.INCOMPLETE


def test_a_session_ended_delayed_in_transit_still_waits_for_its_calls() -> None:
    """A producer retrying through a broker outage keeps a batch's first timestamp, and spooled
    calls come later still: the wait counts from when the SessionEnded was read. Counted from
    its old timestamp (the chaos broker-outage run), the session was closed incomplete at once
    while its calls were on their way."""
    started, call, other, ended = synthetic_session("a", SHAPE).records
    buffers = PartitionBuffers(committed=0)
    buffers.add(0, started, at=0.0, arrived=100.0)
    buffers.add(1, call, at=1.0, arrived=100.0)
    buffers.add(2, ended, at=2.0, arrived=100.0)  # sent at 2, acknowledged after the outage
    buffers.advance(100.0)  # read to the end: the wall clock
    assert buffers.ready(None, wait_s=5, idle_s=60) == []
    buffers.add(3, other, at=101.0, arrived=103.0)  # from a spool, drained after the broker
    [(buffer, status)] = buffers.ready(103.0, wait_s=5, idle_s=60)
    assert status is TrajectoryStatus.COMPLETE and len(buffer.calls) == 2


def test_late_records_are_told_apart_from_a_reread_of_an_emitted_session() -> None:
    """A call after its trajectory is late (dropped, counted); reading it again is not."""
    records = synthetic_session("a", SHAPE).records
    buffers = PartitionBuffers(committed=0)
    order = [records[0], records[1], records[3]]  # the second call is missing
    for offset, record in enumerate(order):
        buffers.add(offset, record, at=0.0)
    buffers.advance(100.0)
    [(_, status)] = buffers.ready(None, 5, 60)
    assert status is TrajectoryStatus.INCOMPLETE
    buffers.mark_emitted("a")
    assert buffers.add(3, records[2], at=101.0) is Taken.LATE
    assert buffers.add(4, SCORED, at=101.0) is Taken.IGNORED
    assert (buffers.late_records, buffers.ignored_records) == (1, 1)

    # A new owner re-reading from an earlier commit point (another session held it there)
    # skips the session's records and the late call alike, without counting them late again.
    state = {"version": 1, "committed": 0, "emitted": {"a": 2}}
    again = PartitionBuffers.from_state(state, committed=0)
    taken = [again.add(offset, record, at=0.0) for offset, record in enumerate(order)]
    assert taken == [Taken.REREAD] * 3 and again.open == {}
    assert again.add(3, records[2], at=101.0) is Taken.LATE  # offset 3 was past the emission
    assert again.add(3, records[2], at=101.0) is Taken.REREAD  # and now it is remembered
    assert again.late_records == 1


@pytest.mark.parametrize(
    "error",
    [HANDED_BACK, f"{HANDED_BACK}; workspace diff unavailable: gone", "harness exited 1", None],
)
def test_a_session_a_node_handed_back_is_marked_superseded(error: str | None) -> None:
    *records, ended = synthetic_session("h", SHAPE).records
    assert isinstance(ended, SessionEnded)
    ended = ended.model_copy(update={"status": SessionStatus.CANCELLED, "error": error})
    buffers = PartitionBuffers(committed=0)
    for offset, record in enumerate([*records, ended]):
        buffers.add(offset, record, at=0.0)
    [(buffer, status)] = buffers.ready(0.0, wait_s=5, idle_s=60)
    trajectory = build_trajectory(buffer, status, get_strategy("prefix_merge"), "prefix_merge")
    assert (SUPERSEDED in trajectory.stats.notes) is (error or "").startswith(HANDED_BACK)
    assert trajectory.session_status is SessionStatus.CANCELLED


def test_a_strategy_that_needs_a_tokenizer_is_refused_at_start() -> None:
    with pytest.raises(ConfigurationError, match="retokenize strategy needs --tokenizer"):
        Reconstructor(ReconstructSettings(strategy="retokenize"), KafkaSettings())
