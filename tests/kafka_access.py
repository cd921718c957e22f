"""One write and one group read as a given client: what an ACL lets it do or refuses."""

from __future__ import annotations

from rollstream.kafka.clients import make_consumer, make_producer
from rollstream.settings import KafkaSettings


async def write_one(kafka: KafkaSettings, topic: str) -> None:
    """Produce one record to ``topic`` and wait for its acknowledgement."""
    producer = make_producer(kafka, request_timeout_ms=10_000)
    try:
        await producer.start()
        await producer.send_and_wait(topic, b"v", key=b"k")
    finally:
        await producer.stop()


async def read_in_group(kafka: KafkaSettings, topic: str, group: str) -> None:
    """Join ``group`` on ``topic`` and fetch once (an empty fetch is a success)."""
    consumer = make_consumer(kafka, topic, group_id=group, auto_offset_reset="earliest")
    try:
        await consumer.start()
        await consumer.getmany(timeout_ms=3000)
    finally:
        await consumer.stop()
