"""What the transactional processor hands its transformation, and what it takes back.

A :class:`Batch` of decoded records in, a :class:`Transaction` per input partition out; the
:class:`Transformation` protocol is all an application of the processor implements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import SerializationError
from rollstream.kafka.deadletters import dead_letter
from rollstream.kafka.parts import Headers, after, split
from rollstream.schemas import AvroRecord, AvroSerializer, DeadLetter


class UnexpectedRecordError(SerializationError):
    """A well-formed record of another type than the processor's input takes."""


@dataclass(frozen=True)
class Incoming:
    """One record read: the message, and its decoded record or the dead letter it became."""

    message: ConsumerRecord
    record: AvroRecord | None = None
    dead: DeadLetter | None = None


@dataclass
class Batch:
    """One poll, decoded, by partition; ``generation`` is the rebalance count before it."""

    generation: int
    records: dict[TopicPartition, list[Incoming]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(r) for r in self.records.values())

    def ends(self) -> dict[TopicPartition, int]:
        """Each partition's offset after its last record in the batch."""
        # A record joined from parts sits at its first part's offset and ends past its last.
        return {tp: max(after(r.message) for r in rs) for tp, rs in self.records.items() if rs}


@dataclass(frozen=True)
class Output:
    """A record to write (the state topic and dead letters are the processor's)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers = ()

    @classmethod
    def split(cls, topic: str, key: bytes | None, value: bytes) -> list[Output]:
        """The records carrying ``value``: itself, or its parts when over the record budget."""
        return [cls(topic, key, part, headers) for part, headers in split(key, value)]


@dataclass
class Transaction:
    """What one input partition's transaction writes; None fields are left as they are."""

    outputs: list[Output] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    state: dict[str, Any] | None = None  # the partition's new state (needs ``state_topic``)
    offset: int | None = None  # the partition's next offset to commit

    def empty(self) -> bool:
        """Whether it would write nothing."""
        return not self.outputs and not self.dead and self.state is None and self.offset is None


class Transformation[T](Protocol):
    """What an application of the processor writes: its transformation, nothing of Kafka."""

    #: A rebalance voids a batch in hand (its work is cancelled and the batch read again).
    cancel_on_rebalance: bool

    def assigned(
        self, tp: TopicPartition, state: dict[str, Any] | None, committed: int | None
    ) -> None:
        """``tp`` is ours from now: its last committed state and offset (no await: taken whole)."""

    def revoked(self, tps: Sequence[TopicPartition]) -> None:
        """``tps`` are no longer ours (no transaction of ours is in flight)."""

    async def transform(self, batch: Batch) -> T:
        """Work on a batch outside the commit lock (may be long; may be cancelled)."""

    def transactions(self, batch: Batch, result: T) -> dict[TopicPartition, Transaction]:
        """Under the commit lock: each owned partition's transaction (or none)."""

    def committed(self, tp: TopicPartition, transaction: Transaction) -> None:
        """``transaction`` of ``tp`` committed."""


@dataclass
class ProcessorMetrics:
    """What the processor itself counts."""

    records: int = 0
    dead_letters: int = 0
    transactions: int = 0
    dropped_batches: int = 0  # voided by a rebalance
    fenced: int = 0  # partitions given up because another member's producer fenced ours
    retaken: int = 0  # partitions taken afresh because their producer lost its broker
    schema_refreshes: int = 0  # the schema store re-read for a writer schema not known yet


@dataclass(frozen=True)
class Decoded:
    """One decoding attempt: the record, or the error (a retriable one is tried once more)."""

    message: ConsumerRecord
    record: AvroRecord | None = None
    error: SerializationError | None = None

    @property
    def retry(self) -> bool:
        """Whether the error may go away after a schema-store refresh."""
        return self.error is not None and self.error.retriable

    def final(self, group_id: str) -> Incoming:
        """The record, or its dead letter (carrying the error's retriable flag)."""
        if self.error is None:
            return Incoming(self.message, record=self.record)
        return Incoming(self.message, dead=dead_letter(self.message, self.error, group_id))


def decode(
    serializer: AvroSerializer, accepts: tuple[type, ...], message: ConsumerRecord
) -> Decoded:
    """``message`` decoded (of a type in ``accepts``, if given), or the error it failed with."""
    try:
        if message.value is None:
            raise SerializationError("a record without a value")
        record = serializer.decode(message.value)
        if accepts and not isinstance(record, accepts):
            raise UnexpectedRecordError(
                f"a {type(record).__name__} record, not a "
                + " or ".join(t.__name__ for t in accepts)
            )
    except SerializationError as exc:
        return Decoded(message, error=exc)
    return Decoded(message, record=record)
