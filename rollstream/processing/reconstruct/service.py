"""The reconstructor: a consumer group over the events topic that emits each session once.

Records are buffered per session (delta-encoded, so memory is O(tokens of open sessions)). A
session is emitted when its SessionEnded arrived and all the calls it reports are in, or after
a bounded wait (``incomplete``), or when it stayed silent past the idle timeout
(``abandoned``); both deadlines count in the records' own time (see ``buffers``), so a restart
or a rebalance does not push them back. Each poll's emissions go out in one Kafka transaction
together with the dead letters, the per-partition state and the input offsets; offsets only
move up to the oldest still-open session, so a crash or a rebalance re-reads what is needed,
and the state written in the same transaction keeps the re-read from emitting anything twice.
Every trajectory is measured before the transaction opens: one over the record budget goes
out without its messages (flagged), or as a dead letter saying why (``consumers.oversized``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import IllegalStateError
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import (
    ConfigurationError,
    RecordTooLargeError,
    SerializationError,
    UnknownSchemaError,
)
from rollstream.kafka.clients import make_consumer, make_producer, ordinary_tasks
from rollstream.kafka.deadletters import dead_letter
from rollstream.kafka.schema_store import SchemaStore
from rollstream.models.families import load_family
from rollstream.models.family import Family
from rollstream.processing.oversized import encode_trajectory
from rollstream.processing.reconstruct.buffers import (
    PartitionBuffers,
    SessionBuffer,
    Taken,
    build_trajectory,
)
from rollstream.processing.reconstruct.settings import ReconstructSettings
from rollstream.processing.reconstruct.state import load_states, state_key, state_records
from rollstream.processing.reconstruct.strategies import NEEDS_TOKENIZER, get_strategy
from rollstream.schemas import AvroSerializer, DeadLetter, TopicNames, utcnow
from rollstream.schemas.trajectories import Trajectory, TrajectoryStatus
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)


@dataclass
class ReconstructMetrics:
    """Counters the service logs and tests read."""

    records: int = 0
    trajectories: int = 0
    dead_letters: int = 0
    transactions: int = 0
    by_status: dict[str, int] | None = None
    late_records: int = 0  # dropped: their session's trajectory had gone out already
    ignored_records: int = 0  # dropped: not a session record
    oversized_trimmed: int = 0  # trajectories recorded without their messages to fit
    oversized_dead_letters: int = 0  # trajectories too large even so: dead-lettered


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: Reconstructor) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # A transaction in flight finishes first: the group's rebalance waits for this
        # callback, so the next owner starts from committed offsets and state, never from a
        # transaction that could still commit after it began. (aiokafka's TxnOffsetCommit has
        # no generation fencing, KIP-447, so this is what keeps a slow owner from committing
        # for partitions it lost.) Then the buffers are dropped: the next owner re-reads them.
        async with self.owner.committing:
            for tp in revoked:
                self.owner.partitions.pop(tp, None)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.owner.take_partitions(list(assigned))


class Reconstructor:
    """One instance of the service; run several with the same group to scale out."""

    def __init__(self, settings: ReconstructSettings, kafka: KafkaSettings) -> None:
        self.settings = settings
        self.kafka = kafka
        self.names = TopicNames(kafka.topic_prefix)
        self.output = self.names.resolve(settings.output)
        self.strategy = get_strategy(settings.strategy)
        needs = settings.strategy in NEEDS_TOKENIZER
        if needs and settings.tokenizer is None and settings.family is None:
            # Said at start, not as a dead letter for every session later.
            raise ConfigurationError(
                f"the {settings.strategy} strategy needs --tokenizer or --family (the served "
                "model's folder or family)"
            )
        self.context_tokenizer: Family | None = (
            load_family(settings.family, settings.tokenizer)
            if settings.family or settings.tokenizer
            else None
        )
        self.serializer = AvroSerializer()
        self.partitions: dict[TopicPartition, PartitionBuffers] = {}
        self._state_chunks: dict[TopicPartition, int] = {}  # records of each partition's state
        self.metrics = ReconstructMetrics(by_status={})
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._store: SchemaStore | None = None
        self._dead: list[DeadLetter] = []
        self.committing = asyncio.Lock()

    async def start(self) -> None:
        """Join the group and open the transactional producer (fencing our previous run)."""
        self._store = SchemaStore(self.kafka, self.serializer.registry)
        await self._store.start()
        self._producer = make_producer(
            self.kafka, transactional_id=self.settings.transactional_id, linger_ms=20
        )
        await self._producer.start()
        self._consumer = make_consumer(
            self.kafka,
            group_id=self.settings.group_id,
            max_poll_records=self.settings.max_batch_records,
        )
        self._consumer.subscribe([self.names.events], listener=_Rebalance(self))
        with ordinary_tasks():  # an interceptor may share this loop (see ordinary_tasks)
            await self._consumer.start()

    async def stop(self) -> None:
        """Leave the group; open sessions are left to whoever takes the partitions next."""
        for resource in (self._consumer, self._producer, self._store):
            if resource is not None:
                with contextlib.suppress(Exception):
                    await resource.stop()

    async def __aenter__(self) -> Reconstructor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def take_partitions(self, tps: list[TopicPartition]) -> None:
        """Load the state of newly assigned partitions before reading them."""
        assert self._consumer is not None
        states = await load_states(self.kafka, self.names.state, self.settings.group_id, tps)
        for tp in tps:
            committed = await self._consumer.committed(tp)
            self.partitions[tp] = PartitionBuffers.from_state(states.get(tp), committed)
            self._state_chunks[tp] = int(states[tp].get("chunks", 1)) if tp in states else 0

    async def run(self, stop: asyncio.Event) -> None:
        """Poll, buffer, emit; until ``stop`` is set."""
        assert self._consumer is not None
        last_log = time.monotonic()
        while not stop.is_set():
            batch = await self._consumer.getmany(
                timeout_ms=200, max_records=self.settings.max_batch_records
            )
            touched: set[TopicPartition] = set()
            for tp, messages in batch.items():
                buffers = self.partitions.get(tp)
                if buffers is None:
                    # Fetched while its state was still loading (the fetcher does not wait for
                    # the rebalance listener) or just revoked: read these again later.
                    if tp in self._consumer.assignment():
                        self._consumer.seek(tp, messages[0].offset)
                    continue
                for message in messages:
                    await self._take(tp, buffers, message)
                touched.add(tp)
            await self._advance_clocks()
            await self._emit_ready(touched)
            if time.monotonic() - last_log > 30:
                last_log = time.monotonic()
                log.info("reconstruct: %s", self.progress())

    async def _advance_clocks(self) -> None:
        """Partitions read to their end: their clocks move on to the wall clock.

        Until then a partition's clock is its newest record's time, so reading a backlog does
        not abandon a session whose later records are still ahead in it.
        """
        assert self._consumer is not None
        wall = time.time()
        assignment = self._consumer.assignment()
        for tp, buffers in self.partitions.items():
            if not buffers.open or tp not in assignment:
                continue  # only open sessions have deadlines
            # read_committed stops at the last stable offset (-1 when the broker has none).
            end = self._consumer.last_stable_offset(tp)
            if end is None or end < 0:
                end = self._consumer.highwater(tp)
            if end is None:
                continue  # not fetched yet: its end is unknown
            try:
                position = await self._consumer.position(tp)
            except IllegalStateError:
                continue  # revoked meanwhile
            if position >= end:
                buffers.advance(wall)

    async def _take(
        self, tp: TopicPartition, buffers: PartitionBuffers, message: ConsumerRecord
    ) -> None:
        self.metrics.records += 1
        try:
            record = self._decode(message.value)
        except UnknownSchemaError:
            assert self._store is not None
            await self._store.refresh()  # a newer writer: its schema is in the store by now
            try:
                record = self._decode(message.value)
            except SerializationError as exc:
                self._dead.append(dead_letter(message, exc, self.settings.group_id))
                buffers.skip(message.offset)
                return
        except SerializationError as exc:
            self._dead.append(dead_letter(message, exc, self.settings.group_id))
            buffers.skip(message.offset)
            return
        taken = buffers.add(message.offset, record, _record_time(message), time.time())
        if taken is Taken.LATE:
            self.metrics.late_records += 1
            log.warning(
                "late record dropped: %s of session %s at %s:%d arrived after the session's "
                "trajectory was emitted",
                type(record).__name__,
                record.session_id,
                tp.topic,
                message.offset,
            )
        elif taken is Taken.IGNORED:
            self.metrics.ignored_records += 1
            log.warning(
                "record ignored: %s at %s:%d (%s)",
                type(record).__name__,
                tp.topic,
                message.offset,
                "no session id"
                if getattr(record, "session_id", None) == ""
                else "not a session record",
            )

    def _decode(self, value: bytes | None) -> Any:
        if value is None:
            raise SerializationError("a record without a value")
        return self.serializer.decode(value)

    async def _emit_ready(self, touched: set[TopicPartition]) -> None:
        # Under the lock a revocation waits for: what is built here is for partitions we own.
        async with self.committing:
            await self._emit_ready_locked(touched)

    async def _emit_ready_locked(self, touched: set[TopicPartition]) -> None:
        ready: list[tuple[TopicPartition, SessionBuffer, TrajectoryStatus]] = []
        for tp, buffers in self.partitions.items():
            for buffer, status in buffers.ready(
                None, self.settings.wait_for_calls_s, self.settings.idle_timeout_s
            ):
                ready.append((tp, buffer, status))
                touched.add(tp)
        if not ready and not self._dead and not touched:
            return
        outputs: list[tuple[bytes, bytes]] = []
        for tp, buffer, status in ready:
            try:
                trajectory = self._trajectory(buffer, status)
                key = (trajectory.group_id or trajectory.session_id).encode()
                encoded = encode_trajectory(self.serializer, key, trajectory)
            except RecordTooLargeError as exc:
                # Sending it would abort the transaction, and the restart would meet it again.
                log.warning("session %s dead-lettered: %s", buffer.session_id, exc)
                self.metrics.oversized_dead_letters += 1
                self._dead.append(self._session_dead_letter(tp, buffer, exc))
            except Exception as exc:  # a strategy bug must not stop every other session
                log.exception("session %s could not be reconstructed", buffer.session_id)
                self._dead.append(self._session_dead_letter(tp, buffer, exc))
            else:
                if encoded.left_out:
                    log.warning(
                        "session %s recorded without its %s: its trajectory is over the "
                        "record budget",
                        buffer.session_id,
                        ", ".join(encoded.left_out),
                    )
                    self.metrics.oversized_trimmed += 1
                outputs.append((key, encoded.value))
                assert self.metrics.by_status is not None
                self.metrics.by_status[status.value] = (
                    self.metrics.by_status.get(status.value, 0) + 1
                )
            self.partitions[tp].mark_emitted(buffer.session_id)
        await self._commit(outputs, touched)

    async def _commit(
        self, outputs: list[tuple[bytes, bytes]], touched: set[TopicPartition]
    ) -> None:
        """Trajectories, dead letters, partition states and offsets: all or nothing."""
        touched = {tp for tp in touched if tp in self.partitions}  # not those revoked meanwhile
        assert self._producer is not None
        offsets = {}
        for tp in touched:
            committed = self.partitions[tp].commit_offset()
            if committed is not None:
                offsets[tp] = committed
        dead, self._dead = self._dead, []
        states = {
            tp: state_records(
                state_key(self.settings.group_id, tp),
                self.partitions[tp].state(),
                self._state_chunks.get(tp, 0),
            )
            for tp in touched
        }
        async with self._producer.transaction():
            for key, value in outputs:
                await self._producer.send(self.output, value, key=key)
            for letter in dead:
                await self._producer.send(
                    self.names.deadletters, self.serializer.encode(letter), key=letter.key
                )
            for records in states.values():
                for record_key, state in records:
                    await self._producer.send(self.names.state, state, key=record_key)
            if offsets:
                await self._producer.send_offsets_to_transaction(offsets, self.settings.group_id)
        for tp, records in states.items():
            self._state_chunks[tp] = sum(value is not None for _, value in records)
        self.metrics.transactions += 1
        self.metrics.trajectories += len(outputs)
        self.metrics.dead_letters += len(dead)

    def _trajectory(self, buffer: SessionBuffer, status: TrajectoryStatus) -> Trajectory:
        return build_trajectory(
            buffer, status, self.strategy, self.settings.strategy, self.context_tokenizer
        )

    def _session_dead_letter(
        self, tp: TopicPartition, buffer: SessionBuffer, exc: Exception
    ) -> DeadLetter:
        return DeadLetter(
            source_topic=tp.topic,
            partition=tp.partition,
            offset=buffer.first_offset,
            key=buffer.session_id.encode(),
            value=None,
            consumer_group=self.settings.group_id,
            error_type=(
                type(exc).__name__
                if isinstance(exc, RecordTooLargeError)
                else f"strategy:{type(exc).__name__}"
            ),
            error_message=str(exc)[:2000],
            retriable=False,
            failed_at=utcnow(),
        )

    def progress(self) -> str:
        """One line: records read and dropped, sessions open, trajectories emitted."""
        m = self.metrics
        open_sessions = sum(len(b.open) for b in self.partitions.values())
        return (
            f"{m.records} records ({m.late_records} late, {m.ignored_records} ignored), "
            f"{open_sessions} open sessions, {m.trajectories} trajectories "
            f"({m.oversized_trimmed} without their messages to fit), {m.dead_letters} dead "
            f"letters ({m.oversized_dead_letters} over the record budget)"
        )


def _record_time(message: ConsumerRecord) -> float:
    """A record's time in seconds: its Kafka timestamp, never later than now.

    Capped at the wall clock so that a producer whose clock runs ahead cannot move its
    partition's clock past everyone else's deadlines; a record without one is taken as now.
    """
    now = time.time()
    stamp: int | None = message.timestamp
    if stamp is None or stamp < 0:
        return now
    return min(stamp / 1000.0, now)
