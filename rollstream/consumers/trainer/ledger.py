"""Per-partition offsets of a trainer stream: how far it is safe to commit, and what lies beyond.

Pure bookkeeping, no Kafka, on the consumers' ledger (``rollstream.kafka.ledger``). Every record
read is *pending* (held by a group that is not yet delivered) or *finished* (delivered, dropped,
a duplicate, undecodable). The safe offset of a partition is its oldest pending record, or the
next offset to read when nothing is pending: a restart from there re-reads every record an
unfinished group still needs. The trajectory ids of finished records at or past that offset are
kept, so a restart that also knows them (a :class:`StreamPosition` stored in a checkpoint)
skips them instead of delivering them again.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from rollstream.kafka.ledger import PartitionLedger

Partition = tuple[str, int]
"""(topic, partition); aiokafka's ``TopicPartition`` is such a tuple."""

_PRUNE_EVERY = 4096


class PartitionPosition(BaseModel):
    """Where to resume one partition, and the trajectories past it that are already done."""

    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    done: list[str] = Field(default_factory=list)


class StreamPosition(BaseModel):
    """A resumable position of a stream; JSON-serialisable for a training checkpoint.

    ``finished_groups`` are the (task_id, group_id) of the most recently delivered or dropped
    groups: a copy of one of their records re-delivered past the offsets is ignored too.
    """

    model_config = ConfigDict(frozen=True)

    partitions: list[PartitionPosition] = Field(default_factory=list)
    finished_groups: list[tuple[str, str]] = Field(default_factory=list)

    @property
    def offsets(self) -> dict[Partition, int]:
        """The offset to resume each partition from."""
        return {(p.topic, p.partition): p.offset for p in self.partitions}

    @property
    def done(self) -> set[str]:
        """Trajectory ids past the offsets that must not be delivered again."""
        return {tid for p in self.partitions for tid in p.done}


class OffsetLedger:
    """Pending and finished records per partition, fed in offset order per partition.

    A record is *held* while pending; a finished one names its trajectory (None: nothing to
    skip on a re-read, a duplicate or an undecodable record, say).
    """

    def __init__(self) -> None:
        self._ledgers: dict[Partition, PartitionLedger[str]] = {}
        self._carried: dict[Partition, set[str]] = {}
        self._since_prune = 0

    def _ledger(self, partition: Partition) -> PartitionLedger[str]:
        return self._ledgers.setdefault(partition, PartitionLedger())

    def read(self, partition: Partition, offset: int, end: int | None = None) -> None:
        """A record at ``offset`` was read (call before hold or finish).

        ``end``: where reading goes on after it, for a record joined from parts (its last
        part's offset + 1); a hold or finish still names ``offset``, its first part's.
        """
        self._ledger(partition).read(offset, end)

    def hold(self, partition: Partition, offset: int) -> None:
        """The record is pending: commits must not pass it."""
        self._ledger(partition).hold(offset)

    def finish(self, partition: Partition, offset: int, trajectory_id: str | None) -> None:
        """The record is delivered or dropped (or was never pending)."""
        ledger = self._ledger(partition)
        ledger.release(offset)
        if trajectory_id is not None:
            ledger.finish(trajectory_id, offset)
            carried = self._carried.get(partition)
            if carried:
                carried.discard(trajectory_id)  # now known with its offset
        self._since_prune += 1
        if self._since_prune >= _PRUNE_EVERY:
            self.prune()

    def safe(self, partition: Partition) -> int | None:
        """The offset up to which everything of ``partition`` is finished; None if unknown."""
        ledger = self._ledgers.get(partition)
        return None if ledger is None else ledger.safe()

    def safe_offsets(self) -> dict[Partition, int]:
        """:meth:`safe` of every partition read or restored."""
        out = {}
        for partition, ledger in self._ledgers.items():
            offset = ledger.safe()
            if offset is not None:
                out[partition] = offset
        return out

    def pending(self, partition: Partition) -> set[int]:
        """Offsets of the partition's pending records (a copy)."""
        ledger = self._ledgers.get(partition)
        return set() if ledger is None else set(ledger.held)

    def prune(self) -> None:
        """Forget finished records before the safe offsets: a restart never re-reads them."""
        self._since_prune = 0
        for ledger in self._ledgers.values():
            ledger.prune()

    def release(self, partitions: Iterable[Partition]) -> None:
        """Forget partitions this process no longer reads (revoked in a rebalance)."""
        for partition in partitions:
            self._ledgers.pop(partition, None)
            self._carried.pop(partition, None)

    def restore(self, position: StreamPosition) -> None:
        """Resume from ``position``: its offsets are safe until records past them are read."""
        for p in position.partitions:
            key = (p.topic, p.partition)
            self._ledgers[key] = PartitionLedger(p.offset)
            self._carried[key] = set(p.done)

    def position(self) -> StreamPosition:
        """The safe offsets and the finished trajectory ids at or past them."""
        self.prune()
        partitions = []
        for (topic, partition), offset in sorted(self.safe_offsets().items()):
            done = set(self._ledgers[(topic, partition)].done)
            done |= self._carried.get((topic, partition), set())
            partitions.append(
                PartitionPosition(
                    topic=topic, partition=partition, offset=offset, done=sorted(done)
                )
            )
        return StreamPosition(partitions=partitions)
