"""Records as a Kafka consumer hands them over, for tests that feed code without a broker."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord, TopicPartition


def consumer_record(
    tp: TopicPartition,
    offset: int,
    value: bytes | None,
    key: bytes | None = None,
    timestamp: int = 0,
) -> ConsumerRecord[bytes, bytes]:
    """The record at ``offset`` of ``tp`` (its serialized sizes are its key's and value's)."""
    return ConsumerRecord(
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        timestamp=timestamp,
        timestamp_type=0,
        key=key,
        value=value,
        checksum=None,
        serialized_key_size=len(key) if key is not None else -1,
        serialized_value_size=len(value) if value is not None else -1,
        headers=(),
    )
