"""Sending one batch to Kafka and telling, record by record, what became of it.

Acknowledgements are awaited for as long as the producer keeps retrying (an idempotent
producer retries a batch until the broker takes it, and the broker drops the copies of a retry):
giving up on a batch and sending it again through another producer would write it twice once
the broker is back. While the wait lasts, ``Producers.waiting`` is called every ``step`` seconds
so the caller can make the batch durable and keep its other records moving to the spool.

A record the broker (or the client) refuses for its size is not an outage: retrying cannot help,
and spooling it would hold every later record behind it for good. Such records are isolated (a
batch refused as a whole is sent again one record at a time, since together they may exceed a
limit each one fits) and reported as rejected with the reason; the caller sets them aside.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
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
    """Where ``deliver`` gets a producer, and what it tells about the broker."""

    async def get(self) -> AIOKafkaProducer | None:
        """A started producer; None when the broker cannot be reached (``failed`` was told)."""

    def discard(self) -> None:
        """Replace the producer: a refused batch leaves a gap in its idempotence sequence."""

    def failed(self, exc: BaseException) -> None:
        """The broker refused for a reason other than size, or did not answer: an outage."""

    def waiting(self, seconds: float) -> None:
        """Acknowledgements have been awaited ``seconds`` so far (called every ``step``)."""


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
    producers: Producers, topic: str, batch: list[Record], timeout: float, step: float
) -> Delivery:
    """Send ``batch`` in order; records refused for their size are isolated and rejected.

    ``timeout`` bounds handing the records to the producer (it waits for metadata and room);
    acknowledgements are awaited as long as it takes, with ``waiting`` every ``step``.
    """
    delivery = Delivery([False] * len(batch))
    if await _send_together(producers, topic, batch, timeout, step, delivery):
        # Whatever was not acknowledged is sent again, one record at a time, in order.
        producers.discard()
        await _send_alone(producers, topic, batch, timeout, step, delivery)
    return delivery


async def _acknowledged(
    producers: Producers, futures: Collection[asyncio.Future[object]], step: float
) -> None:
    pending = set(futures)
    waited = 0.0
    while pending:
        _, pending = await asyncio.wait(pending, timeout=step)
        if pending:
            waited += step
            producers.waiting(waited)


async def _send_together(
    producers: Producers,
    topic: str,
    batch: list[Record],
    timeout: float,
    step: float,
    delivery: Delivery,
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
    except (KafkaError, TimeoutError, OSError) as exc:
        producers.failed(exc)
        for future in futures.values():
            future.add_done_callback(_consume)
        return False
    await _acknowledged(producers, futures.values(), step)
    failure: BaseException | None = None
    for i, future in futures.items():
        if future.cancelled():
            continue
        error = future.exception()
        if error is None:
            delivery.sent[i] = True
        elif isinstance(error, SIZE_ERRORS):
            refused = True
        elif failure is None:
            failure = error
    if failure is not None and not refused:
        producers.failed(failure)
    return refused


async def _send_alone(
    producers: Producers,
    topic: str,
    batch: list[Record],
    timeout: float,
    step: float,
    delivery: Delivery,
) -> None:
    for i, (key, value) in enumerate(batch):
        if delivery.sent[i]:
            continue
        producer = await producers.get()
        if producer is None:
            return
        try:
            async with asyncio.timeout(timeout):
                future = await producer.send(topic, value, key=key)
            await _acknowledged(producers, [future], step)
            future.result()
        except SIZE_ERRORS as exc:
            delivery.rejected[i] = f"{type(exc).__name__}: {exc}"
            producers.discard()
            continue
        except (KafkaError, TimeoutError, OSError) as exc:
            producers.failed(exc)
            return
        delivery.sent[i] = True


def _consume(future: asyncio.Future[object]) -> None:
    # A future given up on may still fail later: retrieve it, so asyncio logs nothing.
    if not future.cancelled():
        future.exception()
