"""The reconstructor: a transformation on the transactional processor, over the events topic.

Records are buffered per session (delta-encoded, so memory is O(tokens of open sessions)). A
session is emitted when its SessionEnded arrived and all the calls it reports are in, or after
a bounded wait (``incomplete``), or when it stayed silent past the idle timeout
(``abandoned``); both deadlines count in the records' own time (see ``buffers``), so a restart
or a rebalance does not push them back. Each poll's emissions go out in one transaction per
input partition (``rollstream.kafka.processor``) together with its dead letters, its state and
its offset; offsets only move up to the oldest still-open session, so a crash or a rebalance
re-reads what is needed, and the state written in the same transaction keeps the re-read from
emitting anything twice. A trajectory over the record budget goes out as several records in
the same transaction (``rollstream.kafka.parts``), which every reader joins back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.consumers.reconstruct.buffers import (
    PartitionBuffers,
    SessionBuffer,
    Taken,
    build_trajectory,
)
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.consumers.reconstruct.strategies import NEEDS_TOKENIZER, get_strategy
from rollstream.errors import ConfigurationError
from rollstream.kafka.batches import Batch, Output, ProcessorMetrics, Transaction
from rollstream.kafka.processor import TransactionalProcessor
from rollstream.kafka.processor_service import ProcessorService
from rollstream.models.families import load_family
from rollstream.models.family import Family
from rollstream.schemas import DeadLetter, TopicNames, utcnow
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
    in_parts: int = 0  # trajectories over the record budget, written as several records
    processor: ProcessorMetrics = field(default_factory=ProcessorMetrics)


class Reconstructor(ProcessorService):
    """One instance of the service; run several with the same group to scale out."""

    label = "reconstruct"

    def __init__(self, settings: ReconstructSettings, kafka: KafkaSettings) -> None:
        self.settings = settings
        if settings.instance is not None:
            log.warning(
                "--instance (%s) is ignored: transactional ids are per input partition",
                settings.instance,
            )
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
        self.partitions: dict[TopicPartition, PartitionBuffers] = {}
        self.processor = TransactionalProcessor[set[TopicPartition]](
            kafka,
            self,
            input_topic=self.names.events,
            group_id=settings.group_id,
            dead_letter_topic=self.names.deadletters,
            state_topic=self.names.state,
            max_batch_records=settings.max_batch_records,
        )
        self.serializer = self.processor.serializer
        self.metrics = ReconstructMetrics(by_status={}, processor=self.processor.metrics)

    # The transformation (rollstream.kafka.batches.Transformation).

    cancel_on_rebalance = False

    def assigned(
        self, tp: TopicPartition, state: dict[str, Any] | None, committed: int | None
    ) -> None:
        """Buffers for ``tp`` from its last state: what was emitted past the committed offset."""
        self.partitions[tp] = PartitionBuffers.from_state(state, committed)

    def revoked(self, tps: Sequence[TopicPartition]) -> None:
        """Drop the buffers of ``tps``: their next owner re-reads them."""
        for tp in tps:
            self.partitions.pop(tp, None)

    async def transform(self, batch: Batch) -> set[TopicPartition]:
        """Buffer the batch's records; the partitions it touched."""
        touched: set[TopicPartition] = set()
        for tp, incoming in batch.records.items():
            buffers = self.partitions.get(tp)
            if buffers is None:
                continue  # revoked while the batch was read: its next owner re-reads it
            for i in incoming:
                self.metrics.records += 1
                if i.dead is not None:
                    buffers.skip(i.message.offset)
                else:
                    self._take(tp, buffers, i.message, i.record)
            touched.add(tp)
        await self._advance_clocks()
        return touched

    def transactions(
        self, batch: Batch, touched: set[TopicPartition]
    ) -> dict[TopicPartition, Transaction]:
        """Under the commit lock: the sessions ready, with each touched partition's state."""
        transactions: dict[TopicPartition, Transaction] = {}
        for tp, buffers in self.partitions.items():
            ready = buffers.ready(
                None, self.settings.wait_for_calls_s, self.settings.idle_timeout_s
            )
            if not ready and tp not in touched:
                continue
            transaction = transactions[tp] = Transaction()
            for buffer, status in ready:
                self._emit(tp, buffer, status, transaction)
            transaction.state = buffers.state()
            transaction.offset = buffers.commit_offset()
        return transactions

    def committed(self, tp: TopicPartition, transaction: Transaction) -> None:
        """Count what one partition's transaction wrote."""
        self.metrics.transactions += 1
        self.metrics.trajectories += len(transaction.outputs)
        self.metrics.dead_letters += len(transaction.dead)

    async def _advance_clocks(self) -> None:
        """Partitions read to their end: their clocks move on to the wall clock.

        Until then a partition's clock is its newest record's time, so reading a backlog does
        not abandon a session whose later records are still ahead in it.
        """
        wall = time.time()
        for tp, buffers in list(self.partitions.items()):
            # Only open sessions have deadlines.
            if buffers.open and await self.processor.caught_up(tp):
                buffers.advance(wall)

    def _take(
        self, tp: TopicPartition, buffers: PartitionBuffers, message: ConsumerRecord, record: Any
    ) -> None:
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

    def _emit(
        self,
        tp: TopicPartition,
        buffer: SessionBuffer,
        status: TrajectoryStatus,
        transaction: Transaction,
    ) -> None:
        """The session's trajectory into ``transaction``, or its dead letter saying why."""
        try:
            trajectory = self._trajectory(buffer, status)
            key = (trajectory.group_id or trajectory.session_id).encode()
            outputs = Output.split(self.output, key, self.serializer.encode(trajectory))
        except Exception as exc:  # a strategy bug must not stop every other session
            log.exception("session %s could not be reconstructed", buffer.session_id)
            transaction.dead.append(self._session_dead_letter(tp, buffer, exc))
        else:
            if len(outputs) > 1:
                log.info(
                    "session %s: its trajectory goes out in %d records (over the record budget)",
                    buffer.session_id,
                    len(outputs),
                )
                self.metrics.in_parts += 1
            transaction.outputs += outputs
            assert self.metrics.by_status is not None
            self.metrics.by_status[status.value] = self.metrics.by_status.get(status.value, 0) + 1
        self.partitions[tp].mark_emitted(buffer.session_id)

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
            error_type=f"strategy:{type(exc).__name__}",
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
            f"({m.in_parts} in several records), {m.dead_letters} dead letters"
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
