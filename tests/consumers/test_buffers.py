"""Session buffers: readiness, the safe commit offset, and skipping what was emitted."""

from __future__ import annotations

import pytest

from rollstream.consumers.reconstruct.buffers import PartitionBuffers
from rollstream.consumers.reconstruct.service import Reconstructor
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.errors import ConfigurationError
from rollstream.producers.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import SessionEnded
from rollstream.schemas.trajectories import TrajectoryStatus
from rollstream.settings import KafkaSettings

SHAPE = SyntheticShape(turns=2, system_tokens=8, tool_result_tokens=4, completion_tokens=4)


def test_complete_session_is_ready_at_once_and_the_commit_moves_past_it() -> None:
    a = synthetic_session("a", SHAPE).records  # Started, call, call, Ended
    buffers = PartitionBuffers(committed=0)
    for offset, record in enumerate(a[:-1]):
        buffers.add(offset, record, now=0.0)
        assert buffers.ready(0.0, wait_s=5, idle_s=60) == []
    assert buffers.commit_offset() == 0  # a is open: its records must be re-read after a crash
    buffers.add(3, a[-1], now=1.0)
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
        buffers.add(offset, record, now=0.0)
    [(ready, _)] = buffers.ready(0.0, 5, 60)
    assert ready.session_id == "b"
    buffers.mark_emitted("b")
    assert buffers.commit_offset() == 0
    state = buffers.state()
    assert state["committed"] == 0 and state["emitted"] == {"b": 4}

    # A new owner re-reads from offset 0: b is skipped, a completes, nothing is emitted twice.
    again = PartitionBuffers.from_state(state, committed=0)
    for offset, record in enumerate([*order, a[2], a[3]]):
        again.add(offset, record, now=0.0)
    assert [s.session_id for s, _ in again.ready(0.0, 5, 60)] == ["a"]
    again.mark_emitted("a")
    assert again.commit_offset() == 8
    assert again.state()["emitted"] == {}  # everything is behind the commit now: pruned


def test_missing_calls_wait_then_incomplete_and_silence_is_abandoned() -> None:
    records = synthetic_session("a", SHAPE).records
    ended = records[-1]
    assert isinstance(ended, SessionEnded) and ended.call_count == 2
    buffers = PartitionBuffers(committed=0)
    buffers.add(0, records[0], now=0.0)
    buffers.add(1, records[1], now=0.0)  # one call of two
    buffers.add(2, ended, now=10.0)
    assert buffers.ready(12.0, wait_s=5, idle_s=60) == []
    [(_, status)] = buffers.ready(15.0, wait_s=5, idle_s=60)
    assert status is TrajectoryStatus.INCOMPLETE

    silent = PartitionBuffers(committed=0)
    silent.add(0, records[0], now=0.0)
    assert silent.ready(59.0, 5, 60) == []
    assert silent.ready(60.0, 5, 60)[0][1] is TrajectoryStatus.ABANDONED


def test_duplicates_and_late_calls() -> None:
    records = synthetic_session("a", SHAPE).records
    buffers = PartitionBuffers(committed=0)
    for offset, record in enumerate([records[0], records[1], records[1], records[2], records[3]]):
        buffers.add(offset, record, now=0.0)
    [(buffer, status)] = buffers.ready(0.0, 5, 60)
    assert len(buffer.calls) == 2 and status is TrajectoryStatus.COMPLETE  # a re-sent call once
    buffers.mark_emitted("a")
    buffers.add(5, records[2], now=1.0)  # a call arriving after the emission
    assert buffers.late_records == 1 and buffers.ready(100.0, 5, 60) == []
    # Nothing to skip on a re-read, which starts past it; still dropped if more straggle in.
    assert buffers.state() == {"version": 1, "committed": 6, "emitted": {}}
    buffers.add(6, records[1], now=2.0)
    assert buffers.late_records == 2 and buffers.ready(1e9, 5, 60) == []
    buffers.skip(7)
    assert buffers.commit_offset() == 8


def test_a_strategy_that_needs_a_tokenizer_is_refused_at_start() -> None:
    with pytest.raises(ConfigurationError, match="retokenize strategy needs --tokenizer"):
        Reconstructor(ReconstructSettings(strategy="retokenize"), KafkaSettings())
