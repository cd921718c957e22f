"""A batch decoded while partitions become the processor's is read again, not processed.

No broker: a fake consumer, fake partition producers, and a schema store whose refresh (the
await the processor makes while decoding a record of a newer writer) is where an assignment
completes. The real broker's side of rebalances and fencing is in test_processor.py.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.kafka.batches import Transaction
from rollstream.kafka.processor import TransactionalProcessor
from rollstream.schemas import AvroSerializer, PolicyVersion, utcnow
from rollstream.schemas.serializer import MAGIC
from rollstream.settings import KafkaSettings
from tests.consumer_records import consumer_record
from tests.kafka.echo import Echo

OURS, TAKEN = TopicPartition("in", 0), TopicPartition("in", 1)
#: Where the fenced previous owner of TAKEN had committed: it processed offsets 0 to 4.
PREVIOUS_OWNER_COMMITTED = 5


class FakeProducer:
    """A partition's transactional producer: records its commits."""

    made: ClassVar[dict[TopicPartition, FakeProducer]] = {}

    def __init__(self, kafka: KafkaSettings, tp: TopicPartition, *args: Any, **kw: Any) -> None:
        self.commits: list[Transaction] = []
        FakeProducer.made[tp] = self

    def resume(self, state: dict[str, Any] | None) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def commit(self, transaction: Transaction) -> None:
        self.commits.append(transaction)


class FakeConsumer:
    """Both partitions assigned; one poll of stale TAKEN records, then nothing."""

    def __init__(self, polls: list[dict[TopicPartition, list[ConsumerRecord]]]) -> None:
        self.polls = polls
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.stop = asyncio.Event()

    def assignment(self) -> set[TopicPartition]:
        return {OURS, TAKEN}

    async def getmany(self, **kw: Any) -> dict[TopicPartition, list[ConsumerRecord]]:
        if not self.polls:
            self.stop.set()
            return {}
        return self.polls.pop(0)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))

    async def committed(self, tp: TopicPartition) -> int | None:
        return {TAKEN: PREVIOUS_OWNER_COMMITTED}.get(tp, 0)


class AssigningStore:
    """A schema refresh during which the listener finishes taking TAKEN (fencing its owner)."""

    def __init__(self, processor: TransactionalProcessor[Any]) -> None:
        self.processor = processor

    async def refresh(self) -> None:
        await self.processor._take([TAKEN])


def _message(tp: TopicPartition, offset: int, value: bytes) -> ConsumerRecord[bytes, bytes]:
    return consumer_record(tp, offset, value)


async def test_records_fetched_before_a_partition_became_ours_are_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("rollstream.kafka.processor.PartitionProducer", FakeProducer)
    FakeProducer.made = {}
    version = AvroSerializer().encode(
        PolicyVersion(version=3, published_at=utcnow(), publisher="p")
    )
    newer_writer = MAGIC + bytes(8) + b"\x00"  # a schema the store learns only on refresh
    # Fetched while TAKEN's assignment was loading: from before its previous owner's last
    # commit, so offset 3 was processed (and its output committed) by that owner already.
    poll = {OURS: [_message(OURS, 0, newer_writer)], TAKEN: [_message(TAKEN, 3, version)]}
    consumer = FakeConsumer([poll])
    app = Echo("out", "me")
    processor: TransactionalProcessor[None] = TransactionalProcessor(
        KafkaSettings(), app, input_topic="in", group_id="g", dead_letter_topic="dl"
    )
    processor.consumer = consumer
    processor._store = AssigningStore(processor)  # type: ignore[assignment]
    await processor._take([OURS])

    async with asyncio.timeout(10):
        await processor.run(consumer.stop)

    # Not processed a second time, nor its offset committed backwards: the batch was voided
    # and TAKEN read again from where its previous owner left it.
    assert FakeProducer.made[TAKEN].commits == []
    assert (TAKEN, PREVIOUS_OWNER_COMMITTED) in consumer.seeks
    assert app.copied == set()
