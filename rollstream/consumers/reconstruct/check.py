"""``rollstream check``: the faithfulness checker over a topic of trajectories.

Reads the events topic (calls, delta-encoded) and a trajectories topic, and checks every
trajectory against its session's calls. Trajectories whose strategy says it relaxes the
invariant (Polar's prompt-prefix merge) are checked too, and their violations counted apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer

from rollstream.clients import behind, make_consumer, topic_partitions
from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import Violation, check_segments
from rollstream.errors import ConfigurationError, SerializationError
from rollstream.schemas import AvroSerializer, CallRecord, TopicNames
from rollstream.schemas.trajectories import Trajectory
from rollstream.settings import KafkaSettings


@dataclass
class CheckReport:
    """Trajectories checked and what was found."""

    trajectories: int = 0
    relaxed: int = 0
    violations: list[tuple[str, Violation]] = field(default_factory=list)
    relaxed_violations: int = 0
    missing_sessions: int = 0  # trajectories whose calls are no longer retained


async def _read_all(consumer: AIOKafkaConsumer, topic: str) -> list[bytes]:
    tps = await topic_partitions(consumer, topic)
    if not tps:
        raise ConfigurationError(f"no topic {topic}")
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    end = await consumer.end_offsets(tps)
    values: list[bytes] = []
    while await behind(consumer, end):
        for messages in (await consumer.getmany(timeout_ms=500, max_records=5000)).values():
            values += [m.value for m in messages if m.value is not None]
    return values


async def check_topic(
    kafka: KafkaSettings, trajectories: str, progress: Callable[[str], None] = print
) -> CheckReport:
    """Check every trajectory of the topic ``trajectories`` (logical or full name)."""
    names = TopicNames(kafka.topic_prefix)
    serializer = AvroSerializer()
    calls: dict[str, list[CallRecord]] = defaultdict(list)
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        for value in await _read_all(consumer, names.events):
            try:
                record = serializer.decode(value)
            except SerializationError:
                continue  # the reconstructor dead-lettered it; not ours to judge
            if isinstance(record, CallRecord):
                calls[record.session_id].append(record)
        progress(f"check: calls of {len(calls)} sessions read")
        values = await _read_all(consumer, names.resolve(trajectories))
    finally:
        await consumer.stop()
    report = CheckReport()
    for value in values:
        trajectory = serializer.decode_as(value, Trajectory)
        report.trajectories += 1
        if trajectory.session_id not in calls:
            report.missing_sessions += 1
            continue
        resolved = {c.call_id: c for c in resolve_calls(calls[trajectory.session_id])}
        found = check_segments(trajectory.segments, resolved)
        if trajectory.stats.invariant_relaxed:
            report.relaxed += 1
            report.relaxed_violations += len(found)
        else:
            report.violations += [(trajectory.trajectory_id, v) for v in found]
    return report
