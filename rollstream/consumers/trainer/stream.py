"""TrajectoryStream: a trainer's consumer group over the scored topic, yielding GRPO groups.

Delivery is at-least-once: :meth:`TrajectoryStream.commit` never passes a record of a group
still being assembled, so a restart re-reads what such a group needs and the groups delivered
past it. For exactly-once training keep :meth:`TrajectoryStream.positions` in the checkpoint
(written with the weights) and resume with ``start_offsets=`` it: the offsets, and the
trajectories past them already delivered, skipped (also after rebalances, until a commit).

The stream polls the broker each time it is asked for a group, also when groups completed by
an earlier poll are waiting (it then reads one record), so ``max_poll_interval_ms`` bounds the
time between two requests, that is one training step, not the steps one poll can feed.

A record the stream cannot use (bytes that are no record, a record of another type, a
trajectory that cannot be grouped, anything else that fails while it is handled) is skipped
with a log line and counted in :attr:`TrajectoryStream.metrics`; commits pass it. Only broker
failures leave ``__anext__`` (as :class:`~rollstream.errors.BrokerError`, retriable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import ConsumerStoppedError, KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.consumers.trainer.groups import Group, GroupAssembler, RecordBatch, StreamMetrics
from rollstream.consumers.trainer.ledger import Partition, PartitionPosition, StreamPosition
from rollstream.consumers.trainer.records import as_scored
from rollstream.consumers.trainer.settings import TrainerSettings
from rollstream.errors import (
    BrokerError,
    ConfigurationError,
)
from rollstream.kafka.clients import make_consumer, ordinary_tasks, topic_partitions
from rollstream.kafka.control import publish_policy_version
from rollstream.kafka.parts import after
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import AvroSerializer, PolicyVersion, TopicNames
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: TrajectoryStream) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # The next owner re-reads from the committed offsets; what was delivered is remembered.
        self.owner._generation += 1  # records fetched before are read again: see _take
        self.owner._assembler.release((tp.topic, tp.partition) for tp in revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        # A failure is raised by the next poll (rollstream.kafka.clients.Consumer).
        await self.owner._place(assigned)


class TrajectoryStream:
    """An async iterator of GRPO groups (or plain batches) for one trainer.

    Each trainer uses its own consumer group (``group``), so every trainer receives every
    record at its own pace. Use ``async with`` (or :meth:`start` / :meth:`stop`), iterate,
    train, then ``await stream.commit()``. Set :attr:`policy_version` (or call
    :meth:`publish_policy_version`) after each weight update so stale groups are dropped.

    ``partitions`` reads exactly those partitions of the topic instead of sharing them with
    the group's other members (one consumer per data-parallel rank, say): offsets are still
    committed under ``group``, but nothing is rebalanced.
    """

    def __init__(
        self,
        settings: TrainerSettings | None = None,
        group: str = "trainer-a",
        kafka: KafkaSettings | None = None,
        *,
        start_offsets: StreamPosition | Mapping[Partition, int] | None = None,
        partitions: Sequence[int] | None = None,
    ) -> None:
        self.settings = settings or TrainerSettings()
        self.partitions = None if partitions is None else sorted(set(partitions))
        self.group = group
        self.kafka = kafka or KafkaSettings()
        self.topic = TopicNames(self.kafka.topic_prefix).resolve(self.settings.topic)
        self._assembler = GroupAssembler(self.settings)
        self._serializer = AvroSerializer()
        self._seek: dict[Partition, int] = {}
        if start_offsets is not None:
            position = (
                start_offsets
                if isinstance(start_offsets, StreamPosition)
                else StreamPosition(
                    partitions=[
                        PartitionPosition(topic=t, partition=p, offset=o)
                        for (t, p), o in start_offsets.items()
                    ]
                )
            )
            self._assembler.restore(position)
            self._seek = dict(position.offsets)
        self._consumer: AIOKafkaConsumer | None = None
        self._store: SchemaStore | None = None
        self._stopped = False
        self._feeding: asyncio.Future[None] | None = None  # records being taken (_poll)
        self._generation = 0  # rebalances so far

    @property
    def policy_version(self) -> int:
        """The trainer's current policy version; groups too far behind it are dropped."""
        return self._assembler.policy_version

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        self._assembler.policy_version = version

    @property
    def metrics(self) -> StreamMetrics:
        """Counters: delivered, dropped (stale, incomplete), duplicates, late, skipped."""
        return self._assembler.metrics

    async def start(self) -> None:
        """Join the consumer group on the topic (resuming from its committed offsets)."""
        self._stopped = False
        self._feeding = None
        self._store = SchemaStore(self.kafka, self._serializer.registry)
        self._consumer = make_consumer(
            self.kafka,
            group_id=self.group,
            max_poll_records=self.settings.max_poll_records,
            max_poll_interval_ms=self.settings.max_poll_interval_ms,
            # A time is sought per partition once it is assigned; what it cannot place (an
            # offset out of range) falls back to the start, as without a time.
            auto_offset_reset="latest" if self.settings.start == "latest" else "earliest",
        )
        try:
            await self._store.start()
            with ordinary_tasks():  # an interceptor may share this loop (see ordinary_tasks)
                await self._consumer.start()
            known = await topic_partitions(self._consumer, self.topic)
        except KafkaError as exc:
            await self.stop()
            raise BrokerError(f"trainer stream {self.group}: {exc}") from exc
        if not known:
            await self.stop()
            raise ConfigurationError(f"no topic {self.topic}: run `rollstream topics create`")
        if self.partitions is None:
            self._consumer.subscribe([self.topic], listener=_Rebalance(self))
            return
        missing = sorted(set(self.partitions) - {tp.partition for tp in known})
        if missing:
            await self.stop()
            raise ConfigurationError(
                f"{self.topic} has {len(known)} partitions, not {', '.join(map(str, missing))}"
            )
        assigned = [TopicPartition(self.topic, p) for p in self.partitions]
        self._consumer.assign(assigned)
        try:
            await self._place(assigned)
        except KafkaError as exc:
            await self.stop()
            raise BrokerError(f"trainer stream {self.group}: {exc}") from exc

    async def stop(self) -> None:
        """Leave the group without committing (call :meth:`commit` first if you trained)."""
        self._stopped = True
        for resource in (self._consumer, self._store):
            if resource is not None:
                with contextlib.suppress(Exception):
                    await resource.stop()

    async def __aenter__(self) -> TrajectoryStream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __aiter__(self) -> TrajectoryStream:
        return self

    async def __anext__(self) -> Group | RecordBatch:
        """The next group (groups mode) or batch (batches mode); waits for one."""
        while True:
            if self._assembler.ready and not self._stopped:
                # The broker counts max_poll_interval_ms from the last poll, and one poll can
                # complete the groups of many training steps: a poll of one record at each
                # call makes the limit hold per step. Before pop, so a broker error loses no
                # group.
                await self._poll(0, 1)
            item = self._assembler.pop()
            if item is not None:
                return item
            if self._stopped:
                raise StopAsyncIteration
            await self._poll(self.settings.poll_timeout_ms, self.settings.max_poll_records)

    async def groups(self) -> AsyncIterator[Group]:
        """The stream as groups only (groups mode), for precise typing."""
        if self.settings.mode != "groups":
            raise ConfigurationError("groups() needs mode groups")
        async for item in self:
            assert isinstance(item, Group)
            yield item

    async def batches(self) -> AsyncIterator[RecordBatch]:
        """The stream as plain batches only (batches mode), for precise typing."""
        if self.settings.mode != "batches":
            raise ConfigurationError("batches() needs mode batches")
        async for item in self:
            assert isinstance(item, RecordBatch)
            yield item

    async def commit(self) -> dict[Partition, int]:
        """Commit, per assigned partition, the offset up to which all was delivered or dropped.

        Never past a record of a group still incomplete or not yet yielded: after a restart
        those are read again, and groups delivered past that offset too (at-least-once; see
        :meth:`positions` for exactly-once). Returns what was committed.
        """
        consumer = self._require()
        assignment = consumer.assignment()
        offsets = {
            TopicPartition(*partition): offset
            for partition, offset in self._assembler.safe_offsets().items()
            if TopicPartition(*partition) in assignment
        }
        if offsets:
            try:
                await consumer.commit(offsets)
            except KafkaError as exc:
                raise BrokerError(
                    f"trainer stream {self.group}: commit failed: {exc}", retriable=True
                ) from exc
            for tp in offsets:  # the group's offset is this stream's now
                self._seek.pop((tp.topic, tp.partition), None)
        return {(tp.topic, tp.partition): offset for tp, offset in offsets.items()}

    def positions(self) -> StreamPosition:
        """Where to resume without losing or repeating a group: keep it in the checkpoint.

        The safe offset of every partition read, with the trajectories past it already
        delivered or dropped; pass it back as ``start_offsets=`` after a restart.
        """
        return self._assembler.position()

    async def publish_policy_version(
        self, version: int, metadata: dict[str, str] | None = None
    ) -> PolicyVersion:
        """Publish ``version`` on the control topic (publisher: this consumer group) and use it."""
        record = await publish_policy_version(
            self.kafka, version, publisher=self.group, metadata=metadata
        )
        self.policy_version = version
        return record

    async def _poll(self, timeout_ms: int, max_records: int) -> None:
        """Read what the broker has (waiting up to ``timeout_ms``) into the assembler."""
        if self._feeding is not None:  # its caller was cancelled, or it failed: see _fed
            await self._fed()
        consumer = self._require()
        try:
            batch = await consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except ConsumerStoppedError as exc:
            raise StopAsyncIteration from exc
        except KafkaError as exc:
            raise BrokerError(f"trainer stream {self.group}: {exc}") from exc
        # The consumer's position is past these records now: a caller cancelled while they
        # are taken (a timeout around anext) must not leave the rest unread.
        self._feeding = asyncio.ensure_future(self._feed(consumer, batch))
        await self._fed()

    async def _fed(self) -> None:
        """Wait for the records being taken; a failure there needs a restart of the stream."""
        assert self._feeding is not None  # records go in order: a cancelled caller's first
        try:
            await asyncio.shield(self._feeding)
        except Exception as exc:
            raise BrokerError(
                f"trainer stream {self.group}: taking fetched records failed: {exc}; restart "
                "the stream (reading on would pass the records it never took)",
                retriable=False,
            ) from exc
        self._feeding = None

    async def _feed(
        self, consumer: AIOKafkaConsumer, batch: Mapping[TopicPartition, list[ConsumerRecord]]
    ) -> None:
        now, generation, assignment = time.monotonic(), self._generation, consumer.assignment()
        for tp, messages in batch.items():
            if tp not in assignment:  # fetched just before a revocation: not ours now
                continue
            for message in messages:
                if not await self._take((tp.topic, tp.partition), message, now, generation):
                    return
        self._assembler.expire(now)

    async def _place(self, assigned: Iterable[TopicPartition]) -> None:
        """Seek newly assigned partitions: to ``start_offsets``, else (no commit) to ``start``.

        ``start`` earliest and latest are the consumer's reset policy; a time is looked up
        here, for the partitions the group has no committed offset for. Those are paused
        while it is (before the first await: the fetcher may start on them meanwhile).
        """
        consumer = self._require()
        start = self.settings.start
        unplaced: list[TopicPartition] = []
        for tp in assigned:
            # Kept until a commit covers it: a later rebalance would place the partition at the
            # group's offset, maybe past what the checkpoint trained (re-reads are skipped).
            offset = self._seek.get((tp.topic, tp.partition))
            if offset is not None:
                consumer.seek(tp, offset)
            elif isinstance(start, datetime):
                unplaced.append(tp)
        if not unplaced:
            return
        assert isinstance(start, datetime)
        consumer.pause(*unplaced)  # left paused on a failure, which __anext__ raises
        at = max(0, int(start.timestamp() * 1000))
        by_time = {tp: at for tp in unplaced if await consumer.committed(tp) is None}
        found = await consumer.offsets_for_times(dict(by_time)) if by_time else {}
        after = {tp: hit.offset for tp, hit in found.items() if hit is not None}
        # Nothing written at or after that time (yet): from the end. Sought explicitly, not
        # with seek_to_end, which a reset to earliest still under way can overwrite.
        late = [tp for tp in by_time if tp not in after]
        after |= await consumer.end_offsets(late) if late else {}
        for tp, offset in after.items():
            consumer.seek(tp, offset)
        current = consumer.assignment()
        consumer.resume(*[tp for tp in unplaced if tp in current])

    def _require(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise ConfigurationError("the stream is not started: use `async with` or start()")
        return self._consumer

    async def _take(
        self, partition: Partition, message: ConsumerRecord, now: float, generation: int
    ) -> bool:
        """Hand one record to the assembler; one that cannot be used is skipped, never raised.

        A record that raised here would be met again by every restart (the commit never
        passes it), so a trainer would crash-loop on it: only broker errors go up. False, and
        nothing taken, after a rebalance since ``generation`` (during a schema refresh, say):
        positions went back to the committed offsets, so the batch's records come again.
        """
        try:
            where = f"{partition[0]}[{partition[1]}]@{message.offset}"
            record = await as_scored(
                self._serializer, self._store, self.group, where, message.value
            )
            if self._generation != generation:
                return False
            self._assembler.add(partition, message.offset, record, now, end=after(message))
        except BrokerError:
            raise
        except Exception:
            if self._generation != generation:
                return False
            log.exception(
                "trainer stream %s: skipping the record at %s[%d]@%d, which could not be used",
                self.group,
                partition[0],
                partition[1],
                message.offset,
            )
            self._assembler.skip(partition, message.offset, after(message))
        return True
