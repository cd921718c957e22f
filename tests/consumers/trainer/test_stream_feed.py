"""Taking fetched records into the assembler, across a rebalance that happens meanwhile.

No broker: a fake consumer and a schema store whose refresh is where the group rebalances (the
await a trainer's stream makes while taking a record of a newer writer). The real broker's side
of rebalances is in test_stream.py.
"""

from __future__ import annotations

from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.consumers.trainer import Group, TrainerSettings, TrajectoryStream
from rollstream.consumers.trainer.stream import _Rebalance
from rollstream.errors import UnknownSchemaError
from rollstream.schemas import AvroSerializer, Scored
from tests.consumer_records import consumer_record
from tests.consumers.trainer.records import group_of

TP = TopicPartition("rollstream.scored", 0)


class FakeConsumer:
    """The consumer's assignment: what _feed and the listener ask of it."""

    def assignment(self) -> set[TopicPartition]:
        return {TP}


class NewWriter:
    """Decodes like the real serializer once the store was refreshed; before, the schema is
    unknown (a writer newer than this trainer registered it)."""

    def __init__(self) -> None:
        self.real = AvroSerializer()
        self.known = False

    def decode(self, value: bytes) -> Any:
        if not self.known:
            raise UnknownSchemaError(bytes(8))
        return self.real.decode(value)


class RebalancingStore:
    """A schema store whose refresh lasts across a rebalance that gives the partition back."""

    def __init__(self, stream: TrajectoryStream, writer: NewWriter) -> None:
        self.listener = _Rebalance(stream)
        self.writer = writer

    async def refresh(self) -> None:
        await self.listener.on_partitions_revoked([TP])
        await self.listener.on_partitions_assigned([TP])
        self.writer.known = True


def _messages(records: list[Scored]) -> list[ConsumerRecord[bytes, bytes]]:
    serializer = AvroSerializer()
    return [consumer_record(TP, offset, serializer.encode(r)) for offset, r in enumerate(records)]


async def test_records_taken_across_a_rebalance_are_left_to_be_read_again() -> None:
    stream = TrajectoryStream(TrainerSettings(), "trainer-r")
    consumer = FakeConsumer()
    stream._consumer = consumer
    writer = NewWriter()
    stream._serializer = writer  # type: ignore[assignment]
    stream._store = RebalancingStore(stream, writer)  # type: ignore[assignment]
    messages = _messages(group_of("g", 2))

    # The first record's schema refresh spans a rebalance: the partition was revoked (its
    # state released) and assigned again, so its position went back to the committed offset.
    await stream._feed(consumer, {TP: messages})
    assert not stream._assembler.ready
    # Nothing of that batch is pending or read: a commit cannot pass what was never taken.
    assert stream._assembler.safe_offsets() == {}

    # The records come again from the committed offset, and are taken once.
    await stream._feed(consumer, {TP: messages})
    group = stream._assembler.pop()
    assert isinstance(group, Group) and len(group.trajectory_ids) == 2
    assert stream._assembler.pop() is None
    assert stream._assembler.safe_offsets() == {(TP.topic, TP.partition): 2}
    assert stream.metrics.duplicates == 0
