"""The scorer: a transformation on the transactional processor, over the trajectories topic.

Each poll's batch is evaluated, ``concurrency`` evaluations at a time; then each input
partition's Scored records, dead letters (undecodable records, records that are not
trajectories) and next offset go out in one transaction (``rollstream.kafka.processor``). A
crash before the commit re-scores the batch on restart; the aborted transaction's records never
reach a ``read_committed`` reader, so each trajectory is scored once in what readers see. Each
Scored record over the record budget goes out as several records in the same transaction
(``rollstream.kafka.parts``), so no record can abort the transaction and have a restarted
scorer meet it again.

A rebalance during a batch cancels its evaluations and voids it: the partitions' next owner
(maybe this instance again) starts from the committed offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import TopicPartition

from rollstream.consumers.score.evaluators import EVALUATORS, EvalResult, evaluate, spec_for
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.errors import ConfigurationError
from rollstream.kafka.batches import Batch, Output, ProcessorMetrics, Transaction
from rollstream.kafka.processor import TransactionalProcessor
from rollstream.kafka.processor_service import ProcessorService
from rollstream.sandbox.runtime import LocalRuntime, Runtime
from rollstream.schemas import TopicNames, utcnow
from rollstream.schemas.trajectories import Scored, Trajectory
from rollstream.settings import KafkaSettings, env_name

log = logging.getLogger(__name__)


@dataclass
class ScoreMetrics:
    """Counters the service logs and tests read."""

    records: int = 0
    scored: int = 0
    failed: int = 0  # Scored records without a reward
    dead_letters: int = 0
    transactions: int = 0
    in_parts: int = 0  # Scored records over the record budget, written as several records
    by_evaluator: dict[str, int] = field(default_factory=dict)
    processor: ProcessorMetrics = field(default_factory=ProcessorMetrics)

    @property
    def dropped_batches(self) -> int:
        """Batches voided by a rebalance (their evaluations cancelled, read again)."""
        return self.processor.dropped_batches


def _command_runtime(settings: ScoreSettings) -> Runtime:
    """The runtime of the command evaluators: local processes or docker, walled as configured.

    Made at start, so that a missing SDK or engine, or namespaces this machine refuses, are said
    once, before any trajectory is read. With docker each evaluation gets a fresh container with
    no network and the configured CPU and memory.
    """
    if settings.runtime != "docker":
        return LocalRuntime(
            settings.work_root,
            settings.keep_workdirs,
            walls=settings.isolation == "namespace",
            chosen_by=env_name(ScoreSettings, "isolation"),
        )
    from rollstream.sandbox.docker import DockerRuntime  # the SDK only when asked

    return DockerRuntime(
        settings.docker_image,
        settings.work_root,
        settings.keep_workdirs,
        network="none",
        cpus=settings.docker_cpus,
        memory=settings.docker_memory,
        chosen_by=env_name(ScoreSettings, "runtime"),
    )


class Scorer(ProcessorService):
    """One instance of the service; run several with the same group to scale out."""

    label = "score"

    def __init__(self, settings: ScoreSettings, kafka: KafkaSettings) -> None:
        if settings.default_evaluator not in EVALUATORS:
            # Said at start, not as an error on every trajectory later.
            raise ConfigurationError(
                f"unknown default evaluator {settings.default_evaluator!r} "
                f"(known: {', '.join(sorted(EVALUATORS))})"
            )
        self.settings = settings
        if settings.instance is not None:
            log.warning(
                "--instance (%s) is ignored: transactional ids are per input partition",
                settings.instance,
            )
        self.kafka = kafka
        self.names = TopicNames(kafka.topic_prefix)
        self.input = self.names.resolve(settings.input)
        self.output = self.names.resolve(settings.output)
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self.processor = TransactionalProcessor[list[Scored]](
            kafka,
            self,
            input_topic=self.input,
            group_id=settings.group_id,
            dead_letter_topic=self.names.deadletters,
            accepts=(Trajectory,),
            max_batch_records=settings.max_batch_records,
            # The consumer does not poll while a batch is evaluated (see the setting).
            consumer_overrides={"max_poll_interval_ms": settings.max_poll_interval_ms},
        )
        self.serializer = self.processor.serializer
        self.metrics = ScoreMetrics(processor=self.processor.metrics)
        self._pending: dict[TopicPartition, list[Scored]] = {}
        self.runtime = _command_runtime(settings)

    async def stop(self) -> None:
        """Leave the group, then remove what the command runtime still holds."""
        try:
            await super().stop()
        finally:
            await self.runtime.close()

    # The transformation (rollstream.kafka.batches.Transformation).

    cancel_on_rebalance = True

    def assigned(
        self, tp: TopicPartition, state: dict[str, Any] | None, committed: int | None
    ) -> None:
        """Nothing to load: the scorer keeps no state between batches."""

    def revoked(self, tps: Sequence[TopicPartition]) -> None:
        """Nothing to drop: the batch in hand is voided by the processor."""

    async def transform(self, batch: Batch) -> list[Scored]:
        """Evaluate the batch's trajectories (cancelled by a rebalance or a stop)."""
        self.metrics.records += len(batch)
        trajectories = [
            i.record
            for incoming in batch.records.values()
            for i in incoming
            if isinstance(i.record, Trajectory)
        ]
        return await self._score_all(trajectories)

    def transactions(self, batch: Batch, result: list[Scored]) -> dict[TopicPartition, Transaction]:
        """Each partition's Scored records (or their dead letters) and its next offset."""
        transactions = {tp: Transaction(offset=end) for tp, end in batch.ends().items()}
        scored = iter(result)
        self._pending = {}
        for tp, incoming in batch.records.items():
            for i in incoming:
                if isinstance(i.record, Trajectory):
                    self._add(tp, transactions[tp], next(scored))
        return transactions

    def committed(self, tp: TopicPartition, transaction: Transaction) -> None:
        """Count what one partition's transaction wrote."""
        self.metrics.transactions += 1
        self.metrics.dead_letters += len(transaction.dead)
        for record in self._pending.pop(tp, []):
            self.metrics.scored += 1
            if record.reward is None:
                self.metrics.failed += 1
            self.metrics.by_evaluator[record.evaluator] = (
                self.metrics.by_evaluator.get(record.evaluator, 0) + 1
            )

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
                runtime=self.runtime,
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

    def _add(self, tp: TopicPartition, transaction: Transaction, record: Scored) -> None:
        """``record`` into ``transaction``: one record, or several when over the record budget."""
        key = record.trajectory.group_id.encode()
        outputs = Output.split(self.output, key, self.serializer.encode(record))
        if len(outputs) > 1:
            self.metrics.in_parts += 1
        transaction.outputs += outputs
        self._pending.setdefault(tp, []).append(record)

    def progress(self) -> str:
        """One line: records read, Scored records emitted, how many without a reward."""
        return (
            f"{self.metrics.records} records, {self.metrics.scored} scored "
            f"({self.metrics.failed} without a reward, {self.metrics.in_parts} in several "
            f"records), {self.metrics.dead_letters} dead letters, "
            f"{self.metrics.dropped_batches} batches dropped"
        )
