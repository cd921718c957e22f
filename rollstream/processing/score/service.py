"""The scorer: a consumer group over the trajectories topic that emits each Scored record once.

Each poll's batch is evaluated, ``concurrency`` evaluations at a time, and then goes out in one
Kafka transaction: the Scored records, the dead letters (undecodable records, records that are
not trajectories) and the input offsets, all or nothing. A crash before the commit re-scores
the batch on restart; the aborted transaction's records never reach a ``read_committed``
reader, so each trajectory is scored once in what readers see. Each Scored record is measured
before the transaction opens: one over the record budget goes out with bulky parts left out
(flagged), or its trajectory is dead-lettered saying why (``consumers.oversized``), so no
record can abort the transaction and have a restarted scorer meet it again.

A rebalance during a batch cancels its evaluations and drops it: the partitions' next owner
(maybe this instance again) starts from the committed offsets, and a commit made after the
rebalance could cover records someone else has scored by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

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
from rollstream.processing.oversized import encode_scored
from rollstream.processing.score.evaluators import EVALUATORS, EvalResult, evaluate, spec_for
from rollstream.processing.score.settings import ScoreSettings
from rollstream.schemas import AvroRecord, AvroSerializer, DeadLetter, TopicNames, utcnow
from rollstream.schemas.trajectories import Scored, Trajectory
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)
_PROGRESS_EVERY_S = 30.0


class UnexpectedRecordError(SerializationError):
    """A well-formed record of another type than Trajectory on the scorer's input."""


@dataclass
class ScoreMetrics:
    """Counters the service logs and tests read."""

    records: int = 0
    scored: int = 0
    failed: int = 0  # Scored records without a reward
    dead_letters: int = 0
    transactions: int = 0
    dropped_batches: int = 0  # voided by a rebalance
    oversized_trimmed: int = 0  # Scored records recorded with bulky parts left out to fit
    oversized_dead_letters: int = 0  # trajectories whose Scored record could not fit at all
    by_evaluator: dict[str, int] = field(default_factory=dict)


@dataclass
class _Batch:
    """One poll: what to score, what to dead-letter, where each partition ends."""

    generation: int
    trajectories: list[Trajectory] = field(default_factory=list)
    sources: list[ConsumerRecord] = field(default_factory=list)  # each trajectory's message
    dead: list[DeadLetter] = field(default_factory=list)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: Scorer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        # A transaction in flight finishes first (the rebalance waits for this callback), so
        # the next owner starts from committed offsets; a batch still being evaluated is
        # abandoned, its partitions may be someone else's by the time it would commit.
        async with self.owner.committing:
            self.owner.lost_partitions()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        # Positions were reset to the committed offsets: a batch polled before is stale.
        async with self.owner.committing:
            self.owner.lost_partitions()


class Scorer:
    """One instance of the service; run several with the same group to scale out."""

    def __init__(self, settings: ScoreSettings, kafka: KafkaSettings) -> None:
        if settings.default_evaluator not in EVALUATORS:
            # Said at start, not as an error on every trajectory later.
            raise ConfigurationError(
                f"unknown default evaluator {settings.default_evaluator!r} "
                f"(known: {', '.join(sorted(EVALUATORS))})"
            )
        self.settings = settings
        self.kafka = kafka
        self.names = TopicNames(kafka.topic_prefix)
        self.input = self.names.resolve(settings.input)
        self.output = self.names.resolve(settings.output)
        self.serializer = AvroSerializer()
        self.metrics = ScoreMetrics()
        self.committing = asyncio.Lock()
        self.generation = 0
        self._scoring: asyncio.Task[list[Scored]] | None = None
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._store: SchemaStore | None = None

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
            # The consumer does not poll while a batch is evaluated (see the setting).
            max_poll_interval_ms=self.settings.max_poll_interval_ms,
        )
        self._consumer.subscribe([self.input], listener=_Rebalance(self))
        with ordinary_tasks():  # an interceptor may share this loop (see ordinary_tasks)
            await self._consumer.start()

    async def stop(self) -> None:
        """Leave the group; an uncommitted batch is scored again by the next owner."""
        for resource in (self._consumer, self._producer, self._store):
            if resource is not None:
                with contextlib.suppress(Exception):
                    await resource.stop()

    async def __aenter__(self) -> Scorer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def lost_partitions(self) -> None:
        """A rebalance: the batch in hand is void (called under ``committing``)."""
        self.generation += 1
        if self._scoring is not None:
            self._scoring.cancel()

    async def run(self, stop: asyncio.Event) -> None:
        """Poll, evaluate, commit; until ``stop`` is set (an unfinished batch is dropped)."""
        assert self._consumer is not None
        last_log = time.monotonic()
        while not stop.is_set():
            generation = self.generation  # before the poll: a rebalance during it counts
            polled = await self._consumer.getmany(
                timeout_ms=200, max_records=self.settings.max_batch_records
            )
            if polled:
                batch = await self._read(polled, generation)
                scored = await self._score_until(batch, stop)
                if scored is None and stop.is_set():
                    break  # the batch's next reader, maybe this instance restarted, scores it
                if scored is None or not await self._commit(batch, scored):
                    await self._rewind(polled)
            if time.monotonic() - last_log > _PROGRESS_EVERY_S:
                last_log = time.monotonic()
                log.info("score: %s", self.progress())

    async def _read(
        self, polled: dict[TopicPartition, list[ConsumerRecord]], generation: int
    ) -> _Batch:
        batch = _Batch(generation)
        for tp, messages in polled.items():
            for message in messages:
                self.metrics.records += 1
                try:
                    record = await self._decode(message.value)
                    if not isinstance(record, Trajectory):
                        raise UnexpectedRecordError(
                            f"a {type(record).__name__} record, not a Trajectory"
                        )
                except SerializationError as exc:
                    batch.dead.append(dead_letter(message, exc, self.settings.group_id))
                    continue
                batch.trajectories.append(record)
                batch.sources.append(message)
            batch.offsets[tp] = messages[-1].offset + 1
        return batch

    async def _decode(self, value: bytes | None) -> AvroRecord:
        if value is None:
            raise SerializationError("a record without a value")
        try:
            return self.serializer.decode(value)
        except UnknownSchemaError:
            assert self._store is not None
            await self._store.refresh()  # a newer writer: its schema is in the store by now
            return self.serializer.decode(value)

    async def _score_until(self, batch: _Batch, stop: asyncio.Event) -> list[Scored] | None:
        """The batch's Scored records; None if a rebalance or ``stop`` came first."""
        scoring = asyncio.create_task(self._score_all(batch.trajectories))
        stopping = asyncio.create_task(stop.wait())
        self._scoring = scoring
        try:
            await asyncio.wait({scoring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._scoring = None
            stopping.cancel()
            if not scoring.done():
                # Stopping (or being cancelled): the evaluations' processes are killed.
                scoring.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scoring
        if scoring.cancelled():
            return None
        return scoring.result()

    async def _score_all(self, trajectories: list[Trajectory]) -> list[Scored]:
        return list(await asyncio.gather(*(self._score(t) for t in trajectories)))

    async def _score(self, trajectory: Trajectory) -> Scored:
        spec = spec_for(trajectory, self.settings.default_evaluator)
        async with self._semaphore:
            result: EvalResult = await evaluate(
                trajectory,
                spec,
                timeout_s=self.settings.evaluator_timeout_s,
                work_root=self.settings.work_root,
                keep_workdirs=self.settings.keep_workdirs,
            )
        if result.error is not None:
            log.info("trajectory %s: %s: %s", trajectory.trajectory_id, spec.kind, result.error)
        return Scored(
            trajectory=trajectory,
            reward=result.reward,
            evaluator=spec.kind,
            details=result.details,
            error=result.error,
            scored_at=utcnow(),
        )

    def _encode(
        self, batch: _Batch, scored: list[Scored]
    ) -> tuple[list[tuple[bytes, bytes]], list[DeadLetter], list[Scored], int]:
        """Each Scored record's key and bytes within the budget, else its dead letter.

        Also the records that go out, and how many of them had parts left out to fit.
        """
        outputs: list[tuple[bytes, bytes]] = []
        dead: list[DeadLetter] = []
        kept: list[Scored] = []
        trimmed = 0
        for record, source in zip(scored, batch.sources, strict=True):
            key = record.trajectory.group_id.encode()
            try:
                encoded = encode_scored(self.serializer, key, record)
            except RecordTooLargeError as exc:
                log.warning("trajectory %s dead-lettered: %s", record.trajectory.trajectory_id, exc)
                dead.append(dead_letter(source, exc, self.settings.group_id))
                continue
            if encoded.left_out:
                log.warning(
                    "trajectory %s scored without its %s: the Scored record is over the "
                    "record budget",
                    record.trajectory.trajectory_id,
                    ", ".join(encoded.left_out),
                )
                trimmed += 1
            outputs.append((key, encoded.value))
            kept.append(record)
        return outputs, dead, kept, trimmed

    async def _commit(self, batch: _Batch, scored: list[Scored]) -> bool:
        """Scored records, dead letters and offsets in one transaction; False if void."""
        assert self._producer is not None
        # Measured before the transaction opens: nothing sent in it can be refused for its size.
        outputs, oversized, scored, trimmed = self._encode(batch, scored)
        dead = batch.dead + oversized
        async with self.committing:
            if batch.generation != self.generation:
                return False
            async with self._producer.transaction():
                for key, value in outputs:
                    await self._producer.send(self.output, value, key=key)
                for letter in dead:
                    await self._producer.send(
                        self.names.deadletters, self.serializer.encode(letter), key=letter.key
                    )
                await self._producer.send_offsets_to_transaction(
                    batch.offsets, self.settings.group_id
                )
        self.metrics.transactions += 1
        self.metrics.scored += len(scored)
        self.metrics.dead_letters += len(dead)
        self.metrics.oversized_trimmed += trimmed
        self.metrics.oversized_dead_letters += len(oversized)
        for record in scored:
            if record.reward is None:
                self.metrics.failed += 1
            self.metrics.by_evaluator[record.evaluator] = (
                self.metrics.by_evaluator.get(record.evaluator, 0) + 1
            )
        return True

    async def _rewind(self, polled: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """After a rebalance voided a batch: read its partitions again from the group's offsets.

        Not from the batch's own first offsets: after a rebalance another instance may have
        scored and committed past them.
        """
        assert self._consumer is not None
        self.metrics.dropped_batches += 1
        for tp in polled:
            if tp not in self._consumer.assignment():
                continue
            try:
                committed = await self._consumer.committed(tp)
                if committed is None:
                    await self._consumer.seek_to_beginning(tp)
                else:
                    self._consumer.seek(tp, committed)
            except IllegalStateError:
                # Reassigned meanwhile (a rebalance completes without us): its next owner,
                # maybe us again, starts from the committed offset anyway.
                continue

    def progress(self) -> str:
        """One line: records read, Scored records emitted, how many without a reward."""
        return (
            f"{self.metrics.records} records, {self.metrics.scored} scored "
            f"({self.metrics.failed} without a reward, {self.metrics.oversized_trimmed} with parts "
            f"left out to fit), {self.metrics.dead_letters} dead letters "
            f"({self.metrics.oversized_dead_letters} over the record budget), "
            f"{self.metrics.dropped_batches} batches dropped"
        )
