"""The capture publisher's producer: started on demand, replaced after a failure, closed bounded.

It is what ``delivery.deliver`` sends through (the ``Producers`` protocol),
and it keeps the publisher's broker counters (``connected``, ``send_failures``, ``last_error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from rollstream.kafka.clients import make_producer
from rollstream.producers.publisher.metrics import PublisherMetrics
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)

# A batch is written as one message: half the broker's default message.max.bytes (1 MiB), so
# batching never makes a message too large where the topics keep that default.
_MAX_BATCH_BYTES = 512 * 1024
#: How long closing a producer may take: a broker that hangs never lets it finish.
CLOSE_TIMEOUT_S = 5.0


class BrokerConnection:
    """One producer at a time for the publisher; ``waiting`` is the publisher's hook."""

    def __init__(
        self,
        kafka: KafkaSettings,
        metrics: PublisherMetrics,
        start_timeout_s: float,
        waiting: Callable[[float], None],
    ) -> None:
        self.kafka = kafka
        self.metrics = metrics
        self.start_timeout_s = start_timeout_s
        self._waiting = waiting
        self._producer: AIOKafkaProducer | None = None
        self._closing: set[asyncio.Task[None]] = set()

    async def get(self) -> AIOKafkaProducer | None:
        """The producer, started if need be; None (and ``failed``) if the broker is away."""
        if self._producer is None:
            self._producer = await self._start()
            if self._producer is not None:
                self.metrics.connected = True
        return self._producer

    async def _start(self) -> AIOKafkaProducer | None:
        producer = make_producer(
            self.kafka,
            request_timeout_ms=5000,
            retry_backoff_ms=200,
            # The publisher batches already (see _next_batch): a producer-side linger only adds
            # sender wake-ups, about half a millisecond of CPU per batch. aiokafka's default
            # batch size (16 KiB) is smaller than one record carrying an 8k-token prompt, and a
            # Kafka request carries one batch per partition: every record would be a request.
            linger_ms=0,
            max_batch_size=_MAX_BATCH_BYTES,
        )
        try:
            await asyncio.wait_for(producer.start(), self.start_timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            self.failed(exc)
            with contextlib.suppress(Exception):
                await producer.stop()
            return None
        return producer

    def waiting(self, seconds: float) -> None:
        """Acknowledgements awaited for ``seconds`` (see ``deliver``)."""
        self._waiting(seconds)

    def failed(self, exc: BaseException) -> None:
        """An outage: counted, logged once per error, and the producer replaced."""
        self.unavailable(exc)
        # A producer whose sends failed is replaced: its idempotence state may be poisoned.
        self.discard()

    def unavailable(self, exc: BaseException) -> None:
        """The broker does not answer (or refused): counted and logged once per error."""
        self.metrics.send_failures += 1
        self.metrics.connected = False
        message = f"{type(exc).__name__}: {exc}"
        if message != self.metrics.last_error:
            log.warning("broker unavailable (%s); records go to the spool", message)
        self.metrics.last_error = message

    def discard(self) -> None:
        """Replace the producer; the old one closes in the background."""
        producer, self._producer = self._producer, None
        if producer is not None:
            # Closing waits for its in-flight requests; the sending loop must not.
            task = asyncio.get_running_loop().create_task(_quiet_stop(producer))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close the producer and those being replaced, each within CLOSE_TIMEOUT_S."""
        producer, self._producer = self._producer, None
        if producer is not None:
            # An idempotent producer retries its batches for as long as the broker hangs: what
            # it held is in the spool by now, so the close is bounded, not the process's exit.
            try:
                await asyncio.wait_for(_quiet_stop(producer), CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("the broker does not answer; producer closed unflushed (spooled)")
        if self._closing:
            await asyncio.wait(self._closing, timeout=CLOSE_TIMEOUT_S)


async def _quiet_stop(producer: AIOKafkaProducer) -> None:
    # It ends once the producer's pending batches are sent or expire; an idempotent producer's
    # never expire while the broker hangs, hence the bound in close().
    with contextlib.suppress(Exception):
        await producer.stop()
