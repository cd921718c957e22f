"""Per-partition session buffers: what is open, what was emitted, and how far it is safe to commit.

Pure bookkeeping, no Kafka: the service feeds records in offset order and asks which sessions
are ready. The safe commit offset of a partition is the first offset of its oldest open
session, so after a crash or a rebalance the new owner re-reads every record an open session
needs. Sessions already emitted whose records lie past that offset are remembered (and written
with each transaction) so the re-read emits nothing twice.

Time is the records' own (their Kafka timestamps, in seconds), not when they were read: the
idle timeout follows from a session's records, so a restart or a rebalance that re-reads them
reaches the same deadline, and a session silent for long is closed as soon as its records are
read again. A partition's clock is the newest record time read on it, moved on to the wall
clock by the service once the partition is read to its end (nothing newer can be waiting then).

The short wait after SessionEnded for calls still on their way is the exception: it counts from
when the SessionEnded was read, if that is later than its timestamp. Records delayed in transit
(a producer retrying a batch through a broker outage keeps the batch's first timestamp; a spool
drains minutes later) carry old times, and the calls that such a SessionEnded waits for are
delayed the same way: counted from the old time, the wait would be over before they could
come. A restart re-reading the SessionEnded waits again, which costs seconds, not the hour of
the idle timeout.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.conversation import conversation
from rollstream.consumers.reconstruct.strategies import Strategy, StrategyContext
from rollstream.consumers.reconstruct.threads import threads_of
from rollstream.kafka.ledger import PartitionLedger
from rollstream.models.family import Family
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import (
    AvroRecord,
    CallRecord,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    utcnow,
)
from rollstream.schemas.sessions import SUPERSEDED, handed_back
from rollstream.schemas.trajectories import Trajectory, TrajectoryStatus

STATE_VERSION = 1
#: Emitted sessions remembered in memory beyond the persisted window, so a call straggling in
#: after its session was emitted is dropped rather than opening a session that would later be
#: emitted again as abandoned.
RECENT_SESSIONS = 100_000


class Taken(StrEnum):
    """What ``PartitionBuffers.add`` did with a record."""

    BUFFERED = "buffered"  # kept in its open session
    REREAD = "reread"  # a record of a session emitted before, read again: skipped, as it must be
    LATE = "late"  # arrived after its session's trajectory was emitted: dropped
    IGNORED = "ignored"  # not a session record (another type, or no session id): dropped


@dataclass
class SessionBuffer:
    """The records of one open session, delta-encoded calls as they arrived.

    ``last_time`` and ``ended_time`` are record times (seconds since the epoch), not arrival
    times: the session's deadlines are the same whenever its records are read.
    """

    session_id: str
    first_offset: int
    last_offset: int
    last_time: float
    calls: dict[str, CallRecord] = field(default_factory=dict)
    started: SessionStarted | None = None
    ended: SessionEnded | None = None
    ended_time: float | None = None

    def readiness(self, now: float, wait_s: float, idle_s: float) -> TrajectoryStatus | None:
        """The status to emit the session with at partition time ``now``, or None to wait."""
        if self.ended is not None and self.ended_time is not None:
            if len(self.calls) >= self.ended.call_count:
                return TrajectoryStatus.COMPLETE
            if now - self.ended_time >= wait_s:
                return TrajectoryStatus.INCOMPLETE
            return None
        if now - self.last_time >= idle_s:
            return TrajectoryStatus.ABANDONED
        return None


class PartitionBuffers:
    """One input partition: open sessions, emitted sessions still in the re-read window."""

    def __init__(self, committed: int | None = None, emitted: dict[str, int] | None = None):
        self.open: dict[str, SessionBuffer] = {}
        # Open sessions hold their first record; an emitted session is settled by the last
        # record it saw (rollstream.kafka.ledger).
        self.ledger: PartitionLedger[str] = PartitionLedger(committed, emitted)
        self.recent: OrderedDict[str, None] = OrderedDict.fromkeys(self.ledger.done)
        self.clock = float("-inf")  # partition time: see ``advance``
        self.late_records = 0
        self.ignored_records = 0

    def advance(self, now: float) -> None:
        """Move the partition's clock on to ``now`` (never back)."""
        self.clock = max(self.clock, now)

    def add(
        self, offset: int, record: AvroRecord, at: float, arrived: float | None = None
    ) -> Taken:
        """Take one decoded record of this partition, in offset order.

        ``at`` is its time (its timestamp); ``arrived`` when it was read (wall clock), which
        starts the wait after a SessionEnded if it is later (see the module docs).
        """
        self.ledger.read(offset)
        self.advance(at)
        session = getattr(record, "session_id", None)
        if not isinstance(record, CallRecord | SessionStarted | SessionEnded) or not session:
            self.ignored_records += 1
            return Taken.IGNORED
        if session in self.recent:
            if offset <= self.ledger.done.get(session, -1):
                return Taken.REREAD  # in the emitted trajectory (or dropped before): again
            # After the trajectory (a call after the wait ran out): dropped, and kept in the
            # window so that a re-read skips it rather than dropping it again.
            self.ledger.finish(session, offset)
            self.late_records += 1
            return Taken.LATE
        buffer = self.open.get(session)
        if buffer is None:
            buffer = self.open[session] = SessionBuffer(session, offset, offset, at)
            self.ledger.hold(offset)
        buffer.last_offset, buffer.last_time = offset, max(buffer.last_time, at)
        if isinstance(record, CallRecord):
            buffer.calls.setdefault(record.call_id, record)  # at-least-once: first copy wins
        elif isinstance(record, SessionStarted):
            buffer.started = record
        else:
            buffer.ended = record
            buffer.ended_time = max(at, arrived) if arrived is not None else at
        return Taken.BUFFERED

    def skip(self, offset: int) -> None:
        """A record that was dead-lettered: only the position moves."""
        self.ledger.read(offset)

    def ready(
        self, now: float | None, wait_s: float, idle_s: float
    ) -> list[tuple[SessionBuffer, TrajectoryStatus]]:
        """Sessions to emit at time ``now`` (None: the partition's clock), oldest first."""
        if now is None:
            now = self.clock
        out = []
        for buffer in self.open.values():
            status = buffer.readiness(now, wait_s, idle_s)
            if status is not None:
                out.append((buffer, status))
        return sorted(out, key=lambda item: item[0].first_offset)

    def mark_emitted(self, session_id: str) -> None:
        """The session's trajectory is in this transaction: stop buffering it."""
        buffer = self.open.pop(session_id)
        self.ledger.release(buffer.first_offset)
        self.ledger.finish(session_id, buffer.last_offset)
        self.recent[session_id] = None
        while len(self.recent) > RECENT_SESSIONS:
            self.recent.popitem(last=False)

    def commit_offset(self) -> int | None:
        """The offset to commit: the oldest open session's first record, or past everything."""
        return self.ledger.safe()

    def state(self) -> dict[str, Any]:
        """What a new owner needs: the commit offset and emitted sessions at or past it."""
        emitted = dict(self.ledger.prune())
        return {"version": STATE_VERSION, "committed": self.ledger.safe(), "emitted": emitted}

    @classmethod
    def from_state(cls, state: dict[str, Any] | None, committed: int | None) -> PartitionBuffers:
        """Rebuild from the last state record (None: a partition never written)."""
        if not state:
            return cls(committed)
        emitted = {str(k): int(v) for k, v in (state.get("emitted") or {}).items()}
        return cls(committed, emitted)

    @property
    def open_calls(self) -> int:
        """Calls buffered in open sessions."""
        return sum(len(b.calls) for b in self.open.values())


def build_trajectory(
    buffer: SessionBuffer,
    status: TrajectoryStatus,
    strategy: Strategy,
    strategy_name: str,
    tokenizer: Family | ChatTokenizer | None = None,
) -> Trajectory:
    """Resolve a session's calls, run the strategy, and wrap the result with its metadata."""
    calls = resolve_calls(buffer.calls.values())
    meta = buffer.ended or buffer.started
    reported = buffer.ended.call_count if buffer.ended is not None else 0
    result = strategy(calls, StrategyContext(tokenizer, reported))
    messages, final_text = conversation(buffer.calls.values())
    return Trajectory(
        trajectory_id=f"{buffer.session_id}/{strategy_name}",
        session_id=buffer.session_id,
        task_id=meta.task_id if meta else "",
        group_id=meta.group_id if meta else "",
        sample_index=meta.sample_index if meta else 0,
        harness=meta.harness if meta else "",
        strategy=strategy_name,
        status=status,
        session_status=buffer.ended.status if buffer.ended else SessionStatus.UNKNOWN,
        segments=result.segments,
        # A hand-over's cut-short attempt: its sample runs again elsewhere (see SUPERSEDED).
        stats=result.stats.model_copy(update={"notes": [*result.stats.notes, SUPERSEDED]})
        if handed_back(buffer.ended)
        else result.stats,
        policy_versions=sorted({c.policy_version for c in buffer.calls.values()}),
        created_at=utcnow(),
        task=buffer.started.task if buffer.started else None,
        artifacts=buffer.ended.artifacts if buffer.ended else [],
        messages=messages,
        final_text=final_text,
        threads=threads_of(buffer.calls.values()),
    )
