"""Sending one batch to Kafka and telling, record by record, what became of it.

A record the broker (or the client) refuses for its size is not an outage: retrying cannot help,
and spooling it would hold every later record behind it for good. Such records are isolated (a
batch refused as a whole is sent again one record at a time, since together they may exceed a
limit each one fits) and reported as rejected with the broker's reason; the caller sets them
aside and carries on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

Record = tuple[bytes | None, bytes]

#: What a broker or the client answers for a record or batch too large for the topic.
SIZE_ERRORS: tuple[type[KafkaError], ...] = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)


class Producers(Protocol):
    """Where ``deliver`` gets a producer, and how it asks for a fresh one."""

    async def get(self) -> AIOKafkaProducer | None:
        """A started producer; None when the broker cannot be reached (``failed`` was told)."""

    def discard(self) -> None:
        """Replace the producer: a refused batch leaves a gap in its idempotence sequence."""

    def failed(self, exc: BaseException) -> None:
        """The broker did not answer or refused for another reason: an outage."""


@dataclass
class Delivery:
    """What became of each record of a batch: sent, rejected with a reason, or neither."""

    sent: list[bool]
    rejected: dict[int, str] = field(default_factory=dict)

    @property
    def settled(self) -> int:
        """How many leading records were dealt with (sent or rejected); the rest wait."""
        for i, sent in enumerate(self.sent):
            if not sent and i not in self.rejected:
                return i
        return len(self.sent)


async def deliver(
    producers: Producers, topic: str, batch: list[Record], timeout: float
) -> Delivery:
    """Send ``batch`` in order; records refused for their size are isolated and rejected."""
    delivery = Delivery([False] * len(batch))
    refused = await _send_together(producers, topic, batch, timeout, delivery)
    if refused:
        # Whatever was not acknowledged is sent again, one record at a time, in order.
        producers.discard()
        await _send_alone(producers, topic, batch, timeout, delivery)
    return delivery


async def _send_together(
    producers: Producers, topic: str, batch: list[Record], timeout: float, delivery: Delivery
) -> bool:
    """One pass over the batch; whether anything was refused for its size."""
    producer = await producers.get()
    if producer is None:
        return False
    futures: dict[int, asyncio.Future[object]] = {}
    refused = False
    try:
        async with asyncio.timeout(timeout):
            for i, (key, value) in enumerate(batch):
                try:
                    futures[i] = await producer.send(topic, value, key=key)
                except SIZE_ERRORS:
                    refused = True  # the client's own check: the record alone is too large
            if futures:
                await asyncio.wait(futures.values())
    except (KafkaError, TimeoutError, OSError) as exc:
        producers.failed(exc)
        _settle(futures, delivery)
        return False
    failure = _settle(futures, delivery)
    refused = refused or any(isinstance(f.exception(), SIZE_ERRORS) for f in _failed(futures))
    if failure is not None and not refused:
        producers.failed(failure)
    return refused


async def _send_alone(
    producers: Producers, topic: str, batch: list[Record], timeout: float, delivery: Delivery
) -> None:
    for i, (key, value) in enumerate(batch):
        if delivery.sent[i]:
            continue
        producer = await producers.get()
        if producer is None:
            return
        try:
            async with asyncio.timeout(timeout):
                await (await producer.send(topic, value, key=key))
        except SIZE_ERRORS as exc:
            delivery.rejected[i] = f"{type(exc).__name__}: {exc}"
            producers.discard()
            continue
        except (KafkaError, TimeoutError, OSError) as exc:
            producers.failed(exc)
            return
        delivery.sent[i] = True


def _failed(futures: dict[int, asyncio.Future[object]]) -> list[asyncio.Future[object]]:
    return [
        f for f in futures.values() if f.done() and not f.cancelled() and f.exception() is not None
    ]


def _consume(future: asyncio.Future[object]) -> None:
    # A future given up on (timeout) may still fail later: retrieve it, so asyncio logs nothing.
    if not future.cancelled():
        future.exception()


def _settle(futures: dict[int, asyncio.Future[object]], delivery: Delivery) -> BaseException | None:
    """Mark the acknowledged records sent; the first other failure."""
    failure: BaseException | None = None
    for i, future in futures.items():
        if not future.done():
            future.add_done_callback(_consume)
            continue
        if future.cancelled():
            continue
        exc = future.exception()
        if exc is None:
            delivery.sent[i] = True
        elif failure is None:
            failure = exc
    return failure
