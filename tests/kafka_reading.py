"""Reading what the code under test wrote to a topic, from the beginning, committed data only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.schemas import AvroRecord, AvroSerializer
from rollstream.settings import KafkaSettings


async def read_records[R: AvroRecord](
    settings: KafkaSettings,
    topic: str,
    model: type[R],
    until: int,
    *,
    where: Callable[[R], bool] | None = None,
    timeout: float = 60,
    settle_s: float = 0.0,
) -> list[R]:
    """Decoded records of ``topic`` (those ``where`` keeps) until ``until`` arrived.

    ``settle_s`` reads on that long after: a test asserting "exactly N" sees any extra record.
    """
    consumer = make_consumer(settings)
    await consumer.start()
    serializer = AvroSerializer()
    records: list[R] = []

    async def poll(timeout_ms: int) -> None:
        for messages in (await consumer.getmany(timeout_ms=timeout_ms)).values():
            for message in messages:
                record = serializer.decode_as(message.value or b"", model)
                if where is None or where(record):
                    records.append(record)

    try:
        tps = await topic_partitions(consumer, topic)
        assert tps, f"no topic {topic}"
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        try:
            async with asyncio.timeout(timeout):
                while len(records) < until:
                    await poll(300)
        except TimeoutError:
            raise AssertionError(
                f"{len(records)} of {until} records in {topic} within {timeout:g} s"
            ) from None
        if settle_s:
            await poll(int(settle_s * 1000))
        return records
    finally:
        await consumer.stop()


async def read_values(
    settings: KafkaSettings,
    topic: str,
    expected: int,
    *,
    distinct: bool = False,
    settle_ms: int = 0,
    timeout: float = 30,
) -> list[bytes]:
    """Raw values of every partition of ``topic`` from the beginning, once ``expected`` are there.

    ``distinct`` counts distinct values toward ``expected`` (a test allowing at-least-once copies);
    ``settle_ms`` reads on that long after, so that a test asserting exactly-once sees a copy.
    Values keep their order within a partition.
    """
    consumer = make_consumer(settings)
    await consumer.start()
    values: list[bytes] = []

    async def poll(timeout_ms: int) -> None:
        batch = await consumer.getmany(timeout_ms=timeout_ms)
        values.extend(m.value or b"" for messages in batch.values() for m in messages)

    try:
        tps = await topic_partitions(consumer, topic)
        assert tps, f"no topic {topic}"
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        try:
            async with asyncio.timeout(timeout):
                while len(set(values) if distinct else values) < expected:
                    await poll(500)
        except TimeoutError:
            raise AssertionError(
                f"{len(values)} values ({len(set(values))} distinct) of {expected} in {topic}"
                f" within {timeout:g} s"
            ) from None
        if settle_ms:
            await poll(settle_ms)
        return values
    finally:
        await consumer.stop()
