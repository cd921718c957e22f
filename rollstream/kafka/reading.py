"""Reading retained topics up to the end offsets seen at start (check, replay, ablation).

None of these readers joins a consumer group or commits: they assign every partition, seek to
the beginning or to a time, and stop at the end offsets the topic had when they began, so a
topic still being written to does not keep them reading.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from datetime import datetime

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import ConfigurationError, SerializationError
from rollstream.kafka.clients import behind, make_consumer, topic_partitions
from rollstream.schemas import AvroSerializer, CallRecord, TopicNames
from rollstream.schemas.topics import MAX_MESSAGE_BYTES
from rollstream.settings import KafkaSettings


async def seek(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], since: datetime | None
) -> None:
    """Position ``tps`` at the beginning, or at the first record written at or after ``since``.

    A partition with nothing that recent is positioned at its end.
    """
    if since is None:
        await consumer.seek_to_beginning(*tps)
        return
    found = await consumer.offsets_for_times({tp: int(since.timestamp() * 1000) for tp in tps})
    end = await consumer.end_offsets(tps)
    for tp in tps:
        offset = found.get(tp)
        consumer.seek(tp, offset.offset if offset is not None else end[tp])


async def iter_records(
    consumer: AIOKafkaConsumer,
    topic: str,
    since: datetime | None = None,
    *,
    end: dict[TopicPartition, int] | None = None,
    tombstones: bool = False,
) -> AsyncIterator[ConsumerRecord]:
    """The records of ``topic`` from the beginning (or ``since``) up to its end seen at start.

    That end is the last stable offset for a ``read_committed`` consumer: records committed
    after a transaction still open are not reached. Given :func:`written_ends` as ``end``, the
    read waits until each transaction open then is committed or aborted (at most the
    transaction timeout) and misses no committed record.

    Raises ConfigurationError when there is no such topic. Records without a value (a
    compacted topic's tombstones) are skipped unless ``tombstones``.
    """
    tps = await topic_partitions(consumer, topic)
    if not tps:
        raise ConfigurationError(f"no topic {topic}")
    consumer.assign(tps)
    await seek(consumer, tps, since)
    if end is None:
        end = await consumer.end_offsets(tps)
    while await behind(consumer, end):
        for tp, messages in (await consumer.getmany(timeout_ms=500, max_records=5000)).items():
            for message in messages:
                if message.offset < end[tp] and (tombstones or message.value is not None):
                    yield message


async def raw_records(kafka: KafkaSettings, topic: str) -> AsyncIterator[ConsumerRecord]:
    """The committed records of ``topic`` as the log holds them: parts not joined.

    From the beginning to the end seen at start, like :func:`iter_records`; for weighing what
    was written (``rollstream.kafka.parts``), not for reading records.
    """
    consumer = AIOKafkaConsumer(
        **kafka.client_kwargs(),
        isolation_level="read_committed",
        enable_auto_commit=False,
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
    )
    await consumer.start()
    try:
        async for message in iter_records(consumer, topic):
            yield message
    finally:
        await consumer.stop()


async def written_ends(kafka: KafkaSettings, topic: str) -> dict[TopicPartition, int]:
    """The high watermarks of ``topic``'s partitions, open transactions' records included.

    A read_committed consumer's own end offsets are the last stable ones.

    Raises ConfigurationError when there is no such topic.
    """
    consumer = make_consumer(kafka, isolation_level="read_uncommitted")
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic)
        if not tps:
            raise ConfigurationError(f"no topic {topic}")
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        return ends
    finally:
        await consumer.stop()


async def iter_values(
    consumer: AIOKafkaConsumer, topic: str, since: datetime | None = None
) -> AsyncIterator[bytes]:
    """The values of :func:`iter_records`."""
    async for message in iter_records(consumer, topic, since):
        yield message.value


@dataclass
class SessionCalls:
    """The CallRecords of the events topic grouped by session, in the order they were read."""

    calls: dict[str, list[CallRecord]] = field(default_factory=dict)
    records: int = 0
    undecodable: int = 0  # dead-lettered by the reconstructor; skipped here


async def read_session_calls(
    kafka: KafkaSettings,
    *,
    since: datetime | None = None,
    sessions: Collection[str] | None = None,
) -> SessionCalls:
    """Every retained CallRecord of the events topic, by session (only ``sessions`` if given)."""
    serializer = AvroSerializer()
    calls: dict[str, list[CallRecord]] = defaultdict(list)
    out = SessionCalls()
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        async for value in iter_values(consumer, TopicNames(kafka.topic_prefix).events, since):
            out.records += 1
            try:
                record = serializer.decode(value)
            except SerializationError:
                out.undecodable += 1
                continue
            if isinstance(record, CallRecord) and (
                sessions is None or record.session_id in sessions
            ):
                calls[record.session_id].append(record)
    finally:
        await consumer.stop()
    out.calls = dict(calls)
    return out
