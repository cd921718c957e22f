"""``rollstream check``: the faithfulness checker over a topic of trajectories.

Reads the events topic (calls, delta-encoded) and a trajectories topic, and checks every
trajectory against its session's calls. Trajectories whose strategy says it relaxes the
invariant (Polar's prompt-prefix merge) are checked too, and their violations counted apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import Violation, check_segments
from rollstream.kafka.clients import make_consumer
from rollstream.kafka.reading import iter_values, read_session_calls
from rollstream.schemas import AvroSerializer, TopicNames
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


async def check_topic(
    kafka: KafkaSettings, trajectories: str, progress: Callable[[str], None] = print
) -> CheckReport:
    """Check every trajectory of the topic ``trajectories`` (logical or full name)."""
    names = TopicNames(kafka.topic_prefix)
    serializer = AvroSerializer()
    calls = (await read_session_calls(kafka)).calls
    progress(f"check: calls of {len(calls)} sessions read")
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        values = [v async for v in iter_values(consumer, names.resolve(trajectories))]
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
