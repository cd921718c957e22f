"""Replay: rebuild retained events with another strategy into a topic of its own.

The events topic is the replay source. A replay reads it from the beginning (or from a time),
stops at the end offsets it saw when it started, and writes to ``<prefix>.trajectories.<name>``,
leaving the live pipeline and its consumer group alone. It joins no group and commits nothing:
a replay is re-run from scratch into a new name rather than resumed. A trajectory over the
record budget goes out as several records (``rollstream.kafka.parts``), which readers join.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from aiokafka import AIOKafkaProducer

from rollstream.consumers.reconstruct.buffers import PartitionBuffers, build_trajectory
from rollstream.consumers.reconstruct.strategies import get_strategy
from rollstream.errors import ConfigurationError, SerializationError
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import behind, make_consumer, make_producer, topic_partitions
from rollstream.kafka.parts import split
from rollstream.kafka.reading import seek
from rollstream.models.family import Family
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import AvroSerializer, TopicNames, TopicSpec, topic_specs
from rollstream.schemas.trajectories import Trajectory
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)


@dataclass
class ReplayReport:
    """What a replay read and wrote."""

    topic: str
    records: int = 0
    undecodable: int = 0
    trajectories: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    unfinished_sessions: int = 0  # no SessionEnded before the end offsets: still running
    in_parts: int = 0  # trajectories over the record budget, written as several records


async def replay(
    kafka: KafkaSettings,
    strategy_name: str,
    to: str,
    *,
    since: datetime | None = None,
    sessions: set[str] | None = None,
    tokenizer: Family | ChatTokenizer | None = None,
    progress: Callable[[str], None] = print,
) -> ReplayReport:
    """Rebuild the sessions in the retained events; see the module docstring."""
    strategy = get_strategy(strategy_name)
    names = TopicNames(kafka.topic_prefix)
    output = f"{names.trajectories}.{to}"
    await _create_output(kafka, names, output)
    report = ReplayReport(output)
    serializer = AvroSerializer()
    consumer = make_consumer(kafka)
    producer = make_producer(kafka)
    await consumer.start()
    await producer.start()
    try:
        tps = await topic_partitions(consumer, names.events)
        if not tps:
            raise ConfigurationError(f"no topic {names.events}: nothing to replay")
        consumer.assign(tps)
        await seek(consumer, tps, since)
        end = await consumer.end_offsets(tps)
        start = {tp: await consumer.position(tp) for tp in tps}
        total = sum(max(0, end[tp] - start[tp]) for tp in tps) or 1
        buffers = {tp: PartitionBuffers(start[tp]) for tp in tps}

        async def emit_ready(now: float, wait_s: float) -> None:
            for partition in buffers.values():
                for buffer, status in partition.ready(now, wait_s, float("inf")):
                    trajectory = build_trajectory(
                        buffer, status, strategy, strategy_name, tokenizer
                    )
                    await _emit(producer, output, trajectory, report, serializer)
                    partition.mark_emitted(buffer.session_id)

        last_report = time.monotonic()
        while await behind(consumer, end):
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            now = time.monotonic()
            for tp, messages in batch.items():
                for message in messages:
                    if message.offset >= end[tp]:
                        continue
                    report.records += 1
                    try:
                        record = serializer.decode(message.value or b"")
                    except SerializationError:
                        report.undecodable += 1
                        continue
                    if sessions is None or getattr(record, "session_id", None) in sessions:
                        buffers[tp].add(message.offset, record, now)
            # Wait as long as it takes: a call after its SessionEnded may still be ahead.
            await emit_ready(now, float("inf"))
            if now - last_report > 2:
                last_report = now
                done = 0
                for tp in tps:
                    done += min(await consumer.position(tp), end[tp]) - start[tp]
                progress(
                    f"replay: {100 * done / total:.0f}% of {total} records, "
                    f"{report.trajectories} trajectories"
                )
        # The end: sessions that ended but lack calls are incomplete; unended ones are running.
        await emit_ready(time.monotonic() + 1e9, 0.0)
        report.unfinished_sessions = sum(len(partition.open) for partition in buffers.values())
        await producer.flush()
        return report
    finally:
        await producer.stop()
        await consumer.stop()


async def _emit(
    producer: AIOKafkaProducer,
    output: str,
    trajectory: Trajectory,
    report: ReplayReport,
    serializer: AvroSerializer,
) -> None:
    key = (trajectory.group_id or trajectory.session_id).encode()
    parts = split(key, serializer.encode(trajectory))
    report.in_parts += len(parts) > 1
    for value, headers in parts:
        await producer.send(output, value, key=key, headers=list(headers) or None)
    report.trajectories += 1
    status = trajectory.status.value
    report.by_status[status] = report.by_status.get(status, 0) + 1


async def _create_output(kafka: KafkaSettings, names: TopicNames, output: str) -> None:
    template = next(s for s in topic_specs(names) if s.name == names.trajectories)
    async with TopicAdmin(kafka) as admin:
        await admin.create(
            [
                TopicSpec(
                    output,
                    template.partitions,
                    template.configs,
                    f"replay of the events: {template.description}",
                )
            ]
        )
