"""The capture publisher: records into Kafka without ever delaying a harness.

``publish()`` only enqueues. One background task sends in order: straight to Kafka while the
broker answers, and into the backlog while it does not (then every later record goes there too,
so the order per key is kept), draining it once the broker is back. The backlog is the local
spool and, while the spool cannot be written (a full disk), records held in memory behind it
(``backlog``): the spool alarm shows in the metrics and the log, and records
beyond the memory bound are counted as dropped rather than crashing the interceptor. When it can
make no progress the task waits (``retry_interval_s``); it never spins on the event loop.

Disk work (fsync'd appends, offset commits, segment reads) runs in order on a thread of its own
(``DiskThread``): the loop forwarding the harness's streams never waits on the disk.

A record too large for the topic is not an outage: it is set aside next to the spool with its
reason (``rejected``), counted as ``rejected``, and later records flow on. A
batch the task holds when ``stop()`` gives up on the broker is spooled, not lost (at least once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.errors import RecordTooLargeError
from rollstream.producers.publisher.adopt import adopt_orphans
from rollstream.producers.publisher.backlog import Backlog, DiskThread, Record
from rollstream.producers.publisher.connection import BrokerConnection
from rollstream.producers.publisher.delivery import deliver
from rollstream.producers.publisher.metrics import PublisherMetrics
from rollstream.producers.publisher.rejected import RejectedRecords
from rollstream.producers.publisher.spool import LOCK_TIMEOUT_S, Spool
from rollstream.schemas.topics import check_record_size
from rollstream.settings import KafkaSettings

__all__ = ["CapturePublisher", "PublisherMetrics", "PublisherSettings", "Record"]

log = logging.getLogger(__name__)


class PublisherSettings(BaseSettings):
    """How the capture publisher batches, bounds memory and spools (``ROLLSTREAM_PUBLISHER_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_PUBLISHER_", frozen=True, extra="ignore", hide_input_in_errors=True
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
        default=10.0,
        gt=0,
        description="How long a batch waits for acks before a copy is spooled "
        "(the producer keeps retrying it; the copy is dropped once it is acknowledged).",
    )
    retry_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Pause between attempts to reach an absent broker or an unwritable spool disk.",
    )


_SETTLE_POLL_S = 0.02


class CapturePublisher:
    """Sends records to one topic, in order, through a bounded queue and a disk spool."""

    def __init__(
        self, kafka: KafkaSettings, settings: PublisherSettings, topic: str, spool_dir: Path
    ) -> None:
        self.settings = settings
        self.topic = topic
        # Locked until stop(): SpoolLocked if another publisher keeps it (a shared spool).
        self.spool = Spool(
            settings.spool_dir or spool_dir, topic=topic, lock_timeout_s=LOCK_TIMEOUT_S
        )
        self.rejected = RejectedRecords(self.spool.directory)
        self.metrics = PublisherMetrics(spool_bytes=self.spool.pending_bytes)
        self._backlog = Backlog(
            self.spool, self.metrics, settings.max_queue_records, settings.retry_interval_s
        )
        self._disk = DiskThread()
        self._submitted = 0  # records handed to the disk thread; minus Backlog.added: on their way
        self._queue: asyncio.Queue[Record] = asyncio.Queue(settings.max_queue_records)
        # The batch being sent: spooled ahead of anything spooled meanwhile, or at stop().
        self._in_flight: list[Record] = []
        self._in_flight_spooled = False
        self._connection = BrokerConnection(
            kafka, self.metrics, settings.send_timeout_s, self._waiting
        )
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._spooled = asyncio.Event()  # publish() overflowed into the spool
        self._accepted = 0  # records taken by publish(), in order (see settled())
        self._building: list[Record] = []  # the batch _next_batch lingers over

    @property
    def kafka(self) -> KafkaSettings:
        """The cluster the publisher sends to (its connection's: one source of truth)."""
        return self._connection.kafka

    @kafka.setter
    def kafka(self, kafka: KafkaSettings) -> None:
        # Takes effect with the next producer (after a failure or a restart).
        self._connection.kafka = kafka

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the sending task; the broker may be away (records then wait in the spool).

        First the orphaned spools beside ours are adopted (``adopt``): their records go after
        what ours holds and before anything new, so the order per key holds for a session
        that moved here from a worker that is gone.
        """
        self.metrics.adopted += await self._disk.run(adopt_orphans, self.spool, self.topic)
        await self._disk.run(self._backlog.refresh)
        self._task = asyncio.create_task(self._run(), name="capture-publisher")

    async def stop(self, timeout: float = 10.0) -> None:
        """Send what can be sent within ``timeout``, spool the rest, close the producer.

        A batch the sending task holds when it is cancelled (a broker that hangs without
        closing connections) is spooled too: it may reach the broker twice, never zero times.
        """
        self._stopping.set()
        task = self._task
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            elif not task.cancelled() and task.exception() is not None:
                log.error("the sending task failed", exc_info=task.exception())
        # After whatever the cancelled task left running on the disk thread: it runs in order.
        self._spool_queue()  # the batch in hand first, then the queue
        self._disk.submit(self._backlog.flush, True)
        if lost := await self._disk.run(self._backlog.drop_held):
            self.metrics.dropped += lost
            log.error("stopping with the spool unwritable: %d records held in memory lost", lost)
        await self._disk.run(self.spool.close)  # for the next owner or an adopter
        self._disk.close()
        await self._connection.close()

    async def __aenter__(self) -> CapturePublisher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the harness-facing side -------------------------------------------------------------

    def publish(self, key: bytes | None, value: bytes) -> None:
        """Enqueue a record; never waits for the broker, never raises for a broker or disk problem.

        When the queue is full the record and the queue are handed to the spool's disk thread
        (the append happens there, not on the caller's loop).

        A record over the record budget is set aside at once (see ``rejected``): no broker
        would take it, and its callers (the interceptor) record what fits instead.
        """
        try:
            check_record_size(key, value, f"a record for {self.topic}")
        except RecordTooLargeError as exc:
            self._reject(key, value, str(exc))
            return
        self._accepted += 1
        try:
            self._queue.put_nowait((key, value))
        except asyncio.QueueFull:
            # Keep the order: everything queued goes to the spool before this record.
            self._spool_queue()
            self._spool([(key, value)])
            self._spooled.set()  # the sending task drains the spool before anything newer
        self.metrics.queue_depth = self._queue.qsize()

    async def settled(self, timeout: float) -> bool:
        """Wait until every record published so far survives a crash of this process.

        A record has settled once the broker acknowledged it or it is written to the spool,
        whose next start sends it; one in the queue, in hand, or held in memory (the spool's
        disk refused it) has not. Those always come after every settled one (the order is
        kept), so counting them tells how far the settled prefix reaches. A caller that
        records elsewhere that a record's effect is done (the node committing a sample as run
        once its SessionEnded is published) waits here first. False after ``timeout``.
        """
        target, dropped = self._accepted, self.metrics.dropped
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._accepted - self._unsettled() < target:
            if loop.time() >= deadline or self.metrics.dropped > dropped:
                # A record dropped meanwhile (memory bound, disk full) may be one of ours.
                return False
            # Polled: settling has many paths (acks, spooling, a disk coming back), and a
            # caller waits once per commit, not per record.
            await asyncio.sleep(_SETTLE_POLL_S)
        return True

    def _unsettled(self) -> int:
        in_hand = 0 if self._in_flight_spooled else len(self._in_flight)
        # ``added`` before ``held``: records the disk thread moves from one to the other
        # meanwhile are then counted twice (a later answer), never zero times.
        on_their_way = self._submitted - self._backlog.added
        held = self._backlog.held
        return self._queue.qsize() + len(self._building) + in_hand + on_their_way + held

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
                    await self._pause()  # no progress possible now: wait, never spin
                continue
            batch = await self._next_batch()
            if batch:
                await self._send_in_hand(batch)

    def _pending_spool(self) -> bool:
        # Read from memory: the backlog's own answer may touch the disk (and wait on its thread).
        return self._submitted != self._backlog.added or self._backlog.waiting

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
        # Visible to settled() while it lingers: taken off the queue, in no spool yet. The
        # caller puts it in hand (_send_in_hand) without yielding in between.
        batch: list[Record] = []
        self._building = batch
        try:
            return await self._fill(batch)
        except asyncio.CancelledError:
            self._spool(batch)  # stop() gave up waiting: what was taken goes first, not lost
            raise
        finally:
            self._building = []

    async def _fill(self, batch: list[Record]) -> list[Record]:
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

    async def _send_in_hand(self, batch: list[Record]) -> None:
        """Send a batch taken off the queue; what was not sent goes to the spool."""
        self._in_flight, self._in_flight_spooled = batch, False
        settled, sent = await self._send(batch)
        spooled_meanwhile, self._in_flight = self._in_flight_spooled, []
        self.metrics.published += sent
        self.metrics.batches += 1 if sent else 0
        if spooled_meanwhile:
            # The queue overflowed during the send, so the batch went to the spool ahead of
            # it: drop the copies of what was dealt with; the rest is sent from there.
            self._disk.submit(self._backlog.drop_copies, batch[:settled])
        else:
            self._spool(batch[settled:])

    async def _send(self, batch: list[Record]) -> tuple[int, int]:
        """Send in order; how many leading records were dealt with, and how many were sent."""
        timeout, step = self.settings.send_timeout_s, self.settings.retry_interval_s
        delivery = await deliver(self._connection, self.topic, batch, timeout, step)
        settled = delivery.settled
        for i in sorted(delivery.rejected):
            if i < settled:  # a later one is rejected when its turn comes, not twice
                self._reject(*batch[i], delivery.rejected[i])
        sent = [value for i, (_, value) in enumerate(batch[:settled]) if delivery.sent[i]]
        self.metrics.bytes_published += sum(len(v) for v in sent)
        if sent:
            self.metrics.connected = True
        return settled, len(sent)

    def _waiting(self, seconds: float) -> None:
        """Acks awaited for ``seconds``: past send_timeout_s, what is in hand goes to the spool.

        The producer keeps the batch and retries it (sending it again through another would
        write it twice once the broker is back); the spooled copies make it durable meanwhile,
        and are dropped again once it is acknowledged.
        """
        if seconds < self.settings.send_timeout_s:
            return
        if seconds < self.settings.send_timeout_s + self.settings.retry_interval_s:
            self._connection.unavailable(TimeoutError(f"no acknowledgement within {seconds:g} s"))
        self._spool_queue()  # the batch in hand first, then the queue
        self._disk.submit(self._backlog.flush)

    async def _drain_spool(self) -> bool:
        """Send waiting records in order; False if no progress can be made now."""
        self._disk.submit(self._backlog.flush)
        limit = self.settings.batch_records
        while (taken := await self._disk.run(self._backlog.take, limit)) is not None:
            settled, sent = await self._send(taken.records)
            self.metrics.drained += sent
            await self._disk.run(self._backlog.commit, taken, settled)
            if settled < len(taken.records):
                return False
        return not self._pending_spool()

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), self.settings.retry_interval_s)

    # -- spooling and setting aside ----------------------------------------------------------

    def _spool_queue(self) -> None:
        records = []
        while not self._queue.empty():
            records.append(self._queue.get_nowait())
        self._spool(records)
        self.metrics.queue_depth = 0

    def _spool(self, records: list[Record]) -> None:
        if self._in_flight and not self._in_flight_spooled:
            # The batch being sent is older than anything spooled now: it goes first. Should
            # its send succeed after all, _send_in_hand drops these copies again.
            records = self._in_flight + records
            self._in_flight_spooled = True
        if records:
            self._submitted += len(records)
            self._disk.submit(self._backlog.add, records)

    def _reject(self, key: bytes | None, value: bytes, reason: str) -> None:
        """Set a record no broker takes aside with its reason (on the disk thread), and carry on."""
        self.metrics.rejected += 1
        self._disk.submit(self.rejected.set_aside, self.topic, key, value, reason, self.metrics)
