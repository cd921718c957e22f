"""Assembling GRPO groups (or plain batches) from scored records arriving in any order.

Pure, no Kafka: the stream feeds each record with its partition and offset; the assembler
holds records until their group is complete (or timed out), hands groups out with :meth:`pop`,
drops stale ones, ignores re-delivered trajectories, and keeps the :class:`OffsetLedger` that
says how far each partition may be committed. A group's records stay *pending* until
:meth:`pop` returns (or drops) the group: a completed group waiting in the queue is not
delivered yet, so commits never pass it.

A record that cannot join a group (undecodable, or a trajectory without its task that cannot
be grouped, see ``TrainerSettings.taskless``) is never an error: it is logged, counted in
:class:`StreamMetrics` and finished at once, so commits pass it and a restart does not meet it
again.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from rollstream.consumers.trainer.filters import FilterReason, filter_records, rejected_group
from rollstream.consumers.trainer.ledger import OffsetLedger, Partition, StreamPosition
from rollstream.consumers.trainer.settings import TrainerSettings
from rollstream.schemas import Scored
from rollstream.schemas.sessions import SUPERSEDED

log = logging.getLogger(__name__)

GroupKey = tuple[str, str]
"""(task_id, group_id)"""


def oldest_policy_version(records: Iterable[Scored]) -> int:
    """Min over the records' policy versions; a trajectory without versions counts as 0."""
    versions = [min(r.trajectory.policy_versions, default=0) for r in records]
    return min(versions, default=0)


@dataclass(frozen=True)
class Group:
    """All samples of one (task_id, group_id) — or those that arrived, if ``complete`` is False."""

    task_id: str
    group_id: str
    size: int
    records: tuple[Scored, ...]

    @property
    def complete(self) -> bool:
        """Whether every sample of the group is here (False: yielded partial on a timeout)."""
        return len(self.records) >= self.size

    @property
    def rewards(self) -> list[float | None]:
        """The records' rewards, None where the evaluator failed or the record is unscored."""
        return [r.reward for r in self.records]

    @property
    def oldest_policy_version(self) -> int:
        """The oldest policy version that sampled any token of the group."""
        return oldest_policy_version(self.records)

    @property
    def trajectory_ids(self) -> list[str]:
        """The members' trajectory ids."""
        return [r.trajectory.trajectory_id for r in self.records]


@dataclass(frozen=True)
class RecordBatch:
    """Up to ``batch_size`` records in arrival order (batches mode)."""

    records: tuple[Scored, ...]

    @property
    def oldest_policy_version(self) -> int:
        """The oldest policy version that sampled any token of the batch."""
        return oldest_policy_version(self.records)


@dataclass
class StreamMetrics:
    """Counters of a stream; groups count groups, the rest count records.

    In batches mode ``dropped_stale`` counts records (staleness is judged per record there).
    ``undecodable``, ``taskless``, ``superseded`` and ``unusable`` count records skipped (and
    committed past): not a Scored or Trajectory record; a trajectory that cannot be grouped
    (``taskless=skip``); an attempt a node cut short when it handed the task over (the sample's
    re-run takes its place in the group); a record whose handling failed in any other way.
    ``dropped_status``, ``dropped_uniform`` and ``dropped_tokens`` count what the filters of
    :class:`TrainerSettings` drop (see :mod:`rollstream.consumers.trainer.filters`), groups in
    groups mode and records in batches mode; ``dropped_records`` includes their records.
    ``revoked_partitions`` counts partitions taken away in rebalances (another member joined,
    or a step outlasted ``max_poll_interval_ms``): their records are read again.
    """

    delivered_groups: int = 0
    delivered_records: int = 0
    partial_groups: int = 0
    dropped_stale: int = 0
    dropped_incomplete: int = 0
    dropped_records: int = 0
    duplicates: int = 0
    undecodable: int = 0
    late: int = 0
    taskless: int = 0
    unusable: int = 0
    superseded: int = 0
    dropped_status: int = 0
    dropped_uniform: int = 0
    dropped_tokens: int = 0
    revoked_partitions: int = 0

    def filtered(self, reason: FilterReason, units: int, records: int) -> None:
        """Count ``units`` (groups, or records in batches mode) a filter dropped for ``reason``."""
        name = f"dropped_{reason}"
        setattr(self, name, getattr(self, name) + units)
        self.dropped_records += records


@dataclass
class _Member:
    partition: Partition
    offset: int
    record: Scored


@dataclass
class _Unit:
    """A group (groups mode) or a batch (batches mode) being filled."""

    key: GroupKey | None
    size: int
    first_seen: float
    members: dict[str, _Member] = field(default_factory=dict)
    duplicates: list[tuple[str, Partition, int]] = field(default_factory=list)

    def records(self) -> tuple[Scored, ...]:
        return tuple(m.record for m in self.members.values())


def _remember(memory: OrderedDict[Hashable, None], key: Hashable, limit: int) -> None:
    memory[key] = None
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)


class GroupAssembler:
    """Complete groups out of records in any order, over any number of partitions."""

    def __init__(self, settings: TrainerSettings) -> None:
        self.settings = settings
        self.policy_version = 0
        self.metrics = StreamMetrics()
        self.ledger = OffsetLedger()
        self._open: dict[GroupKey | None, _Unit] = {}  # in order of first record
        self._ready: deque[_Unit] = deque()
        self._pending: dict[str, _Unit] = {}  # trajectory id -> the unit holding it
        self._seen: OrderedDict[Hashable, None] = OrderedDict()  # finished trajectory ids
        self._closed: OrderedDict[Hashable, None] = OrderedDict()  # groups handed on

    @property
    def ready(self) -> bool:
        """Whether a group (or batch) is complete and waits for :meth:`pop`."""
        return bool(self._ready)

    @property
    def batches(self) -> bool:
        """Whether this assembler makes plain batches rather than groups."""
        return self.settings.mode == "batches"

    def add(
        self,
        partition: Partition,
        offset: int,
        record: Scored | None,
        now: float,
        end: int | None = None,
    ) -> None:
        """Take the record at ``offset`` of ``partition`` (None: it could not be decoded).

        Records of one partition come in offset order; ``now`` is a monotonic clock; ``end``
        is where reading goes on for a record joined from parts (see ``OffsetLedger.read``).
        """
        self.ledger.read(partition, offset, end)
        if record is None:
            self.metrics.undecodable += 1
            self.ledger.finish(partition, offset, None)
            return
        if SUPERSEDED in record.trajectory.stats.notes:
            # Counted as a member, it would close the group before the sample's re-run came
            # (dropped as late), with a cut-short rollout scored in its place.
            self.metrics.superseded += 1
            self.ledger.finish(partition, offset, None)
            log.info("skipping %s: %s", record.trajectory.trajectory_id, SUPERSEDED)
            return
        key: GroupKey | None = None
        size = self.settings.batch_size
        if not self.batches:
            placement = self._placement(record)
            if placement is None:
                self._skip_taskless(partition, offset, record)
                return
            key, size = placement
        tid = record.trajectory.trajectory_id
        holder = self._pending.get(tid)
        if holder is not None:  # the first copy is still pending: remember this one with it
            self.metrics.duplicates += 1
            holder.duplicates.append((tid, partition, offset))
            self.ledger.finish(partition, offset, None)
            return
        if tid in self._seen:
            self.metrics.duplicates += 1
            self.ledger.finish(partition, offset, tid)
            return
        if key is not None and key in self._closed:
            self.metrics.late += 1  # a new sample of a group already delivered or dropped
            _remember(self._seen, tid, self.settings.dedupe_window)
            self.ledger.finish(partition, offset, tid)
            return
        unit = self._open.get(key)
        if unit is None:
            unit = self._open[key] = _Unit(key, size, now)
        unit.members[tid] = _Member(partition, offset, record)
        self._pending[tid] = unit
        self.ledger.hold(partition, offset)
        if len(unit.members) >= unit.size:
            self._close(unit)

    def skip(self, partition: Partition, offset: int, end: int | None = None) -> None:
        """Finish a record the stream could not hand to :meth:`add` (counted in ``unusable``)."""
        self.ledger.read(partition, offset, end)
        self.ledger.finish(partition, offset, None)
        self.metrics.unusable += 1

    def expire(self, now: float) -> None:
        """Hand on or drop units older than the timeout (groups or batches)."""
        timeout = self.settings.batch_timeout_s if self.batches else self.settings.group_timeout_s
        if timeout is None:
            return
        while self._open:
            unit = next(iter(self._open.values()))
            if now - unit.first_seen < timeout:
                break
            if self.batches or self.settings.incomplete == "yield":
                self._close(unit)
            else:
                del self._open[unit.key]
                _remember(self._closed, unit.key, self.settings.dedupe_window)
                self.metrics.dropped_incomplete += 1
                self.metrics.dropped_records += len(unit.members)
                self._finish(unit)

    def pop(self) -> Group | RecordBatch | None:
        """The next group (or batch) to deliver, dropping stale ones; None if none is ready."""
        while self._ready:
            unit = self._ready.popleft()
            if unit.key is None:
                batch = self._pop_batch(unit)
                if batch is not None:
                    return batch
                continue
            group = Group(unit.key[0], unit.key[1], unit.size, unit.records())
            self._finish(unit)
            if self._stale(group.oldest_policy_version):
                self.metrics.dropped_stale += 1
                self.metrics.dropped_records += len(group.records)
                continue
            reason = rejected_group(group.records, self.settings) if self.settings.filters else None
            if reason is not None:
                self.metrics.filtered(reason, 1, len(group.records))
                continue
            self.metrics.delivered_groups += 1
            self.metrics.delivered_records += len(group.records)
            if not group.complete:
                self.metrics.partial_groups += 1
            return group
        return None

    def safe_offsets(self) -> dict[Partition, int]:
        """Per partition, the offset up to which every record is delivered or dropped."""
        return self.ledger.safe_offsets()

    def position(self) -> StreamPosition:
        """Where a restart must resume to deliver nothing twice and lose nothing."""
        waiting = {unit.key for unit in self._ready}  # closed, but not delivered yet
        finished = [key for key in self._closed if key not in waiting and isinstance(key, tuple)]
        recent = finished[max(0, len(finished) - self.settings.position_groups) :]
        return self.ledger.position().model_copy(update={"finished_groups": recent})

    def restore(self, position: StreamPosition) -> None:
        """Resume from a :meth:`position` (e.g. kept in a training checkpoint)."""
        self.ledger.restore(position)
        for tid in position.done:
            _remember(self._seen, tid, self.settings.dedupe_window)
        for key in position.finished_groups:
            _remember(self._closed, tuple(key), self.settings.dedupe_window)

    def release(self, partitions: Iterable[Partition]) -> None:
        """Give up partitions (revoked): their pending records will be read again by their owner.

        A group that loses members goes back to waiting for them, even if it was complete.
        """
        gone = set(partitions)
        self.metrics.revoked_partitions += len(gone)
        filling, ready = list(self._open.values()), list(self._ready)
        self._open.clear()
        self._ready.clear()
        lost: set[int] = set()
        for unit in filling + ready:
            for tid in [t for t, m in unit.members.items() if m.partition in gone]:
                del unit.members[tid]
                del self._pending[tid]
                lost.add(id(unit))
            unit.duplicates = [d for d in unit.duplicates if d[1] not in gone]
        for unit in filling:
            if unit.members:
                self._open[unit.key] = unit
        for unit in ready:
            if unit.key is not None and id(unit) in lost:
                self._closed.pop(unit.key, None)  # its missing members may be read again
                if unit.members:
                    self._open[unit.key] = unit
            elif unit.members:
                self._ready.append(unit)
        self._open = dict(sorted(self._open.items(), key=lambda item: item[1].first_seen))
        self.ledger.release(gone)

    def _placement(self, record: Scored) -> tuple[GroupKey, int] | None:
        """The record's group and that group's size; None when it cannot be grouped (skip)."""
        trajectory = record.trajectory
        if trajectory.task is not None:
            return (trajectory.task_id, trajectory.group_id), trajectory.task.samples
        # Without a group id (calls made outside any task) group_size would lump unrelated
        # sessions into one group and normalise rewards across them.
        if self.settings.group_size is not None and trajectory.group_id:
            return (trajectory.task_id, trajectory.group_id), self.settings.group_size
        if self.settings.taskless == "session":
            return (trajectory.task_id, trajectory.session_id), 1
        return None

    def _skip_taskless(self, partition: Partition, offset: int, record: Scored) -> None:
        self.metrics.taskless += 1
        self.ledger.finish(partition, offset, None)
        trajectory = record.trajectory
        log.warning(
            "skipping trajectory %s (session %r, group %r) at %s[%d]@%d: it carries no task "
            "and its group size is unknown; set ROLLSTREAM_TRAINER_TASKLESS=session to train "
            "on it as a group of one, or GROUP_SIZE for task-less groups (%d skipped so far)",
            trajectory.trajectory_id,
            trajectory.session_id,
            trajectory.group_id,
            partition[0],
            partition[1],
            offset,
            self.metrics.taskless,
        )

    def _stale(self, version: int) -> bool:
        bound = self.settings.max_staleness
        return bound is not None and self.policy_version - version > bound

    def _close(self, unit: _Unit) -> None:
        del self._open[unit.key]
        if unit.key is not None:
            _remember(self._closed, unit.key, self.settings.dedupe_window)
        self._ready.append(unit)

    def _finish(self, unit: _Unit) -> None:
        for tid, member in unit.members.items():
            self.ledger.finish(member.partition, member.offset, tid)
            self._pending.pop(tid, None)
            _remember(self._seen, tid, self.settings.dedupe_window)
        for tid, partition, offset in unit.duplicates:
            self.ledger.finish(partition, offset, tid)

    def _pop_batch(self, unit: _Unit) -> RecordBatch | None:
        records = unit.records()
        self._finish(unit)
        fresh = tuple(r for r in records if not self._stale(oldest_policy_version([r])))
        stale = len(records) - len(fresh)
        self.metrics.dropped_stale += stale
        self.metrics.dropped_records += stale
        if self.settings.filters:
            fresh, dropped = filter_records(fresh, self.settings)
            for reason, count in dropped.items():
                self.metrics.filtered(reason, count, count)
        if not fresh:
            return None
        self.metrics.delivered_records += len(fresh)
        return RecordBatch(fresh)
