"""The dead letter a consumer writes for a record it gives up on (one shape for all of them)."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from rollstream.errors import RollstreamError
from rollstream.schemas import DeadLetter, utcnow


def dead_letter(message: ConsumerRecord, exc: Exception, consumer_group: str) -> DeadLetter:
    """``message`` as read, where from, and why it failed (retriable when our error says so)."""
    return DeadLetter(
        source_topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        consumer_group=consumer_group,
        error_type=type(exc).__name__,
        error_message=str(exc)[:2000],
        retriable=exc.retriable if isinstance(exc, RollstreamError) else False,
        failed_at=utcnow(),
    )
