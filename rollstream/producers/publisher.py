"""The capture publisher: records into Kafka without ever delaying a harness.

``publish()`` only enqueues. One background task sends in order: straight to Kafka while the
broker answers, and into the local spool while it does not (then every later record goes to
the spool too, so the order per key is kept), draining the spool once the broker is back.
Memory stays bounded: a full queue spills to the spool; a spool that cannot be written (a full
disk) raises an alarm in the metrics and the log, and records beyond the queue bound are counted
as dropped rather than crashing the interceptor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.clients import make_producer
from rollstream.producers.spool import Spool, SpoolError
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)


class PublisherSettings(BaseSettings):
    """How the capture publisher batches, bounds memory and spools (``ROLLSTREAM_PUBLISHER_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_PUBLISHER_", frozen=True, extra="ignore"
    )

    spool_dir: Path | None = Field(
        default=None, description="Spool directory. Default: STATE_DIR/spool/<client id>."
    )
    max_queue_records: int = Field(default=10_000, ge=1, description="In-memory queue bound.")
    batch_records: int = Field(default=500, ge=1, description="Records sent per batch.")
    linger_ms: float = Field(
        default=250.0,
        ge=0,
        description="How long a batch waits for more records (fewer, larger Kafka requests): "
        "each request costs the client about a millisecond of CPU, and records only feed "
        "consumers that work per session, so a quarter second of delay is cheap.",
    )
    send_timeout_s: float = Field(
        default=10.0, gt=0, description="How long a batch may wait for acks before spooling."
    )
    retry_interval_s: float = Field(
        default=1.0, gt=0, description="Pause between attempts to reach an absent broker."
    )


@dataclass
class PublisherMetrics:
    """Counters for ``/metrics``."""

    published: int = 0
    batches: int = 0
    spooled: int = 0
    drained: int = 0
    dropped: int = 0
    send_failures: int = 0
    spool_errors: int = 0
    spool_alarm: bool = False
    connected: bool = False
    last_error: str = ""
    queue_depth: int = 0
    spool_bytes: int = 0
    bytes_published: int = 0


Record = tuple[bytes | None, bytes]

# A batch is written as one message: half the broker's default message.max.bytes (1 MiB), so
# batching never makes a message too large where the topics keep that default.
_MAX_BATCH_BYTES = 512 * 1024


class CapturePublisher:
    """Sends records to one topic, in order, through a bounded queue and a disk spool."""

    def __init__(
        self, kafka: KafkaSettings, settings: PublisherSettings, topic: str, spool_dir: Path
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.topic = topic
        self.spool = Spool(settings.spool_dir or spool_dir)
        self.metrics = PublisherMetrics(spool_bytes=self.spool.pending_bytes)
        self._queue: asyncio.Queue[Record] = asyncio.Queue(settings.max_queue_records)
        self._overflow: list[Record] = []
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._spooled = asyncio.Event()  # publish() overflowed into the spool

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the sending task; the broker may be away (records then wait in the spool)."""
        self._task = asyncio.create_task(self._run(), name="capture-publisher")

    async def stop(self, timeout: float = 10.0) -> None:
        """Send what can be sent within ``timeout``, spool the rest, close the producer."""
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        self._spool_queue()
        await self._close_producer()
        if self._closing:
            await asyncio.gather(*self._closing)

    async def __aenter__(self) -> CapturePublisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the harness-facing side -------------------------------------------------------------

    def publish(self, key: bytes | None, value: bytes) -> None:
        """Enqueue a record; never blocks and never raises for a broker or disk problem."""
        try:
            self._queue.put_nowait((key, value))
        except asyncio.QueueFull:
            # Keep the order: everything queued goes to the spool before this record.
            self._spool_queue()
            self._spool([(key, value)])
            self._spooled.set()  # the sending task drains the spool before anything newer
        self.metrics.queue_depth = self._queue.qsize()

    # -- the sending task --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if self._stopping.is_set() and self._queue.empty() and not self._pending_spool():
                return
            if self._pending_spool():
                # While anything is spooled, new records queue behind it on disk.
                self._spool_queue()
                if not await self._drain_spool():
                    if self._stopping.is_set():
                        return
                    await self._pause()
                continue
            batch = await self._next_batch()
            if not batch:
                continue
            if await self._send(batch):
                self.metrics.published += len(batch)
                self.metrics.batches += 1
            else:
                self._spool(batch)

    def _pending_spool(self) -> bool:
        return bool(self._overflow) or not self.spool.empty()

    async def _next_record(self) -> Record | None:
        """The next queued record, waiting for it; None on stop() or a queue overflow.

        After an overflow the loop drains the spool first. This is the loop's only pause. It
        waits on the queue, on stop and on an overflow at once, rather than looking every
        fraction of a second: an idle interceptor then costs no CPU here.
        """
        if not self._queue.empty():
            return self._queue.get_nowait()
        if self._stopping.is_set():
            return None
        self._spooled.clear()
        getter = asyncio.ensure_future(self._queue.get())
        others = [asyncio.ensure_future(e.wait()) for e in (self._stopping, self._spooled)]
        try:
            await asyncio.wait((getter, *others), return_when=asyncio.FIRST_COMPLETED)
        finally:
            # A cancelled get leaves its record queued (asyncio.Queue takes it out only when
            # the getter resumes), so nothing is lost either way.
            for waiter in (getter, *others):
                if not waiter.done():
                    waiter.cancel()
        return getter.result() if getter.done() and not getter.cancelled() else None

    def _add(self, batch: list[Record], record: Record) -> bool:
        """Add a record taken from the queue to the batch; False when it must wait instead.

        An overflow moves the whole queue to the spool, so a record taken while anything is
        spooled came after those: it is spooled behind them rather than sent before them.
        """
        if self._pending_spool():
            self._spool([record])
            return False
        batch.append(record)
        return True

    async def _next_batch(self) -> list[Record]:
        batch: list[Record] = []
        first = await self._next_record()
        if first is None or not self._add(batch, first):
            return batch
        # Then linger for more: each Kafka request costs the client about a millisecond of
        # CPU whatever its size, and calls tend to end in waves. The harness never waits.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.linger_ms / 1000
        while len(batch) < self.settings.batch_records:
            if not self._queue.empty():
                if not self._add(batch, self._queue.get_nowait()):
                    break
                continue
            remaining = deadline - loop.time()
            if remaining <= 0 or self._stopping.is_set():
                break
            try:
                record = await asyncio.wait_for(self._queue.get(), remaining)
            except TimeoutError:
                break
            if not self._add(batch, record):
                break
        self.metrics.queue_depth = self._queue.qsize()
        return batch

    async def _send(self, batch: list[Record]) -> bool:
        producer = await self._ensure_producer()
        if producer is None:
            return False
        try:
            futures = [await producer.send(self.topic, value, key=key) for key, value in batch]
            await asyncio.wait_for(asyncio.gather(*futures), self.settings.send_timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            self._failed(exc)
            return False
        self.metrics.bytes_published += sum(len(v) for _, v in batch)
        return True

    async def _drain_spool(self) -> bool:
        """Send spooled records in order; False if the broker is still away."""
        self._flush_overflow()
        while True:
            records = self.spool.read(self.settings.batch_records)
            if not records:
                self.metrics.spool_bytes = self.spool.pending_bytes
                return True
            if not await self._send([(r.key, r.value) for r in records]):
                return False
            self.spool.commit(records[-1])
            self.metrics.drained += len(records)
            self.metrics.spool_bytes = self.spool.pending_bytes

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), self.settings.retry_interval_s)

    # -- spooling ----------------------------------------------------------------------------

    def _spool_queue(self) -> None:
        records = []
        while not self._queue.empty():
            records.append(self._queue.get_nowait())
        self._spool(records)
        self.metrics.queue_depth = 0

    def _spool(self, records: list[Record]) -> None:
        if not records:
            return
        self._flush_overflow()
        if self._overflow:
            self._keep_in_memory(records)
            return
        try:
            self.spool.append(records)
        except SpoolError as exc:
            self.metrics.spool_errors += 1
            if not self.metrics.spool_alarm:
                log.error("spool alarm: %s; keeping records in memory", exc)
            self.metrics.spool_alarm = True
            self._keep_in_memory(records)
            return
        self.metrics.spooled += len(records)
        self.metrics.spool_bytes = self.spool.pending_bytes

    def _keep_in_memory(self, records: list[Record]) -> None:
        room = self.settings.max_queue_records - len(self._overflow)
        self._overflow += records[: max(room, 0)]
        lost = len(records) - max(room, 0)
        if lost > 0:
            self.metrics.dropped += lost
            log.error("spool unavailable and memory bound reached: %d records dropped", lost)

    def _flush_overflow(self) -> None:
        """Move records held in memory (the spool was unwritable) to the spool, in order."""
        if not self._overflow:
            return
        try:
            self.spool.append(self._overflow)
        except SpoolError:
            return
        self.metrics.spooled += len(self._overflow)
        self._overflow = []
        if self.metrics.spool_alarm:
            log.warning("spool writable again; alarm cleared")
        self.metrics.spool_alarm = False

    # -- the producer ------------------------------------------------------------------------

    async def _ensure_producer(self) -> AIOKafkaProducer | None:
        if self._producer is not None:
            return self._producer
        producer = make_producer(
            self.kafka,
            request_timeout_ms=5000,
            retry_backoff_ms=200,
            # This class batches already (see _next_batch): a producer-side linger only adds
            # sender wake-ups, about half a millisecond of CPU per batch. aiokafka's default
            # batch size (16 KiB) is smaller than one record carrying an 8k-token prompt, and a
            # Kafka request carries one batch per partition: every record would be a request.
            linger_ms=0,
            max_batch_size=_MAX_BATCH_BYTES,
        )
        try:
            await asyncio.wait_for(producer.start(), self.settings.send_timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            self._failed(exc)
            with contextlib.suppress(Exception):
                await producer.stop()
            return None
        self._producer = producer
        self.metrics.connected = True
        return producer

    def _failed(self, exc: BaseException) -> None:
        self.metrics.send_failures += 1
        self.metrics.connected = False
        message = f"{type(exc).__name__}: {exc}"
        if message != self.metrics.last_error:
            log.warning("broker unavailable (%s); records go to the spool", message)
        self.metrics.last_error = message
        # A producer whose sends failed is replaced: its idempotence state may be poisoned.
        producer, self._producer = self._producer, None
        if producer is not None:
            # Closing waits for its in-flight requests; the sending loop must not.
            task = asyncio.get_running_loop().create_task(_quiet_stop(producer))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _close_producer(self) -> None:
        if self._producer is not None:
            await _quiet_stop(self._producer)
            self._producer = None


async def _quiet_stop(producer: AIOKafkaProducer) -> None:
    # Not cut short: a cancelled stop leaves connections open. It ends once the producer's
    # pending batches expire (request_timeout_ms) when the broker is away.
    with contextlib.suppress(Exception):
        await producer.stop()
