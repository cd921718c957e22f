"""The dead letter a consumer writes for a record it gives up on (one shape for all of them)."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from rollstream.errors import RollstreamError
from rollstream.schemas import RECORD_BUDGET_BYTES, DeadLetter, record_size, utcnow

# The dead letter carries the failed record with its reason: room for both within one record.
_VALUE_BUDGET = RECORD_BUDGET_BYTES - 16 * 1024


def dead_letter(message: ConsumerRecord, exc: Exception, consumer_group: str) -> DeadLetter:
    """``message`` as read, where from, and why it failed (retriable when our error says so).

    A value too large to travel inside a dead letter is left out (the message says so): the
    source topic, partition and offset still point at it while it is retained.
    """
    value = message.value
    error_message = str(exc)[:2000]
    if record_size(message.key, value) > _VALUE_BUDGET:
        error_message += f" (value of {len(value or b'')} bytes left out: over the record budget)"
        value = None
    return DeadLetter(
        source_topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=value,
        consumer_group=consumer_group,
        error_type=type(exc).__name__,
        error_message=error_message,
        retriable=exc.retriable if isinstance(exc, RollstreamError) else False,
        failed_at=utcnow(),
    )
