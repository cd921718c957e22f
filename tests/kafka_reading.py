"""Reading what the code under test wrote to a topic, from the beginning, committed data only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.kafka.parts import PART_HEADER
from rollstream.kafka.reading import raw_records
from rollstream.schemas import AvroRecord, AvroSerializer
from rollstream.settings import KafkaSettings


async def _read_from_start(
    settings: KafkaSettings,
    topic: str,
    *,
    take: Callable[[bytes], None],
    done: Callable[[], bool],
    shortfall: Callable[[], str],
    timeout: float,
    settle_s: float,
) -> None:
    """Hand every value of every partition of ``topic`` to ``take`` until ``done()``.

    AssertionError naming ``shortfall()`` after ``timeout``; ``settle_s`` reads on that long
    after, so that a test asserting "exactly N" sees any extra record.
    """
    consumer = make_consumer(settings)
    await consumer.start()

    async def poll(timeout_ms: int) -> None:
        for messages in (await consumer.getmany(timeout_ms=timeout_ms)).values():
            for message in messages:
                take(message.value or b"")

    try:
        tps = await topic_partitions(consumer, topic)
        assert tps, f"no topic {topic}"
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        try:
            async with asyncio.timeout(timeout):
                while not done():
                    await poll(300)
        except TimeoutError:
            raise AssertionError(f"{shortfall()} in {topic} within {timeout:g} s") from None
        if settle_s:
            await poll(int(settle_s * 1000))
    finally:
        await consumer.stop()


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
    serializer = AvroSerializer()
    records: list[R] = []

    def take(value: bytes) -> None:
        record = serializer.decode_as(value, model)
        if where is None or where(record):
            records.append(record)

    await _read_from_start(
        settings,
        topic,
        take=take,
        done=lambda: len(records) >= until,
        shortfall=lambda: f"{len(records)} of {until} records",
        timeout=timeout,
        settle_s=settle_s,
    )
    return records


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
    values: list[bytes] = []
    await _read_from_start(
        settings,
        topic,
        take=values.append,
        done=lambda: len(set(values) if distinct else values) >= expected,
        shortfall=lambda: f"{len(values)} values ({len(set(values))} distinct) of {expected}",
        timeout=timeout,
        settle_s=settle_ms / 1000,
    )
    return values


async def records_produced(kafka: KafkaSettings, topic: str) -> int:
    """Records ever produced to ``topic``: the sum of its partitions' end offsets."""
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic) or []
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


async def parts_written(kafka: KafkaSettings, topic: str) -> int:
    """Records of ``topic`` that are parts of a larger one (read raw: nothing joined)."""
    return sum(
        [
            any(name == PART_HEADER for name, _ in m.headers or ())
            async for m in raw_records(kafka, topic)
        ]
    )
