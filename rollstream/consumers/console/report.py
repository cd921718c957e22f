"""``rollstream report``: the console's views of a topic, in one file that needs no server.

The records are read as ``rollstream export`` reads them (no consumer group, from the
beginning or ``since``, up to the end seen at start). Every trajectory counts in the session
list, the groups and the reward series (the console's own aggregates); the first
``max_trajectories`` are kept whole and shown token by token, with their calls' timings read
from the events topic. The page is the console's front end with this data inline
(:meth:`Assets.static_page`): one renderer for the live console and the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rollstream.consumers.console.fleet import CallFacts, finite
from rollstream.consumers.console.rewards import Rewards
from rollstream.consumers.console.trajectory_view import TokenTexts, trajectory_view
from rollstream.consumers.export import exportable

# The export's decoder learns a newer writer's schema from the schema store once.
from rollstream.consumers.export.run import RecordDecoder
from rollstream.kafka.clients import make_consumer
from rollstream.kafka.reading import iter_records, read_session_calls
from rollstream.schemas import Scored, TopicNames, Trajectory
from rollstream.settings import KafkaSettings

Reportable = Scored | Trajectory


def session_row(record: Reportable) -> dict[str, Any]:
    """A trajectory's line in the session list, as the live console's API gives it."""
    trajectory = record.trajectory if isinstance(record, Scored) else record
    return {
        "session_id": trajectory.session_id,
        "task_id": trajectory.task_id,
        "group_id": trajectory.group_id,
        "sample_index": trajectory.sample_index,
        "harness": trajectory.harness,
        "node_id": "",
        "status": trajectory.session_status.value,
        "policy_version": min(trajectory.policy_versions, default=0),
        "calls": trajectory.stats.calls,
        "started_at": None,
        "ended_at": trajectory.created_at.timestamp(),
        "trajectory_id": trajectory.trajectory_id,
        "reward": finite(record.reward) if isinstance(record, Scored) else None,
    }


@dataclass
class ReportInput:
    """What a report shows: every trajectory in the aggregates, the first ones whole."""

    topic: str
    max_trajectories: int = 100
    records: list[Reportable] = field(default_factory=list)
    rewards: Rewards = field(default_factory=Rewards)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    read: int = 0
    other: int = 0  # records of another type
    undecodable: int = 0
    stopped: bool = False  # stopped before the end of the topic

    @property
    def more(self) -> int:
        """Trajectories counted but not shown token by token."""
        return len(self.sessions) - len(self.records)

    def add(self, record: Reportable) -> None:
        """Count a record in the aggregates; keep it whole while there is room."""
        if isinstance(record, Scored):
            self.rewards.scored(record)
        self.sessions[session_row(record)["session_id"]] = session_row(record)
        if len(self.records) < self.max_trajectories:
            self.records.append(record)

    def notes(self) -> list[str]:
        """Lines for the page's header and the command's output."""
        return [
            f"{self.read:,} records read from {self.topic}: {len(self.sessions):,} trajectories "
            f"({len(self.records):,} shown token by token), {self.other:,} of other types, "
            f"{self.undecodable:,} undecodable"
            + (" (stopped before the end of the topic)" if self.stopped else "")
        ]


async def read_report_input(
    kafka: KafkaSettings,
    topic: str,
    *,
    since: datetime | None = None,
    max_trajectories: int = 100,
    stop: Callable[[], bool] = lambda: False,
) -> ReportInput:
    """The records of ``topic`` (a logical or full name) up to its end seen at start.

    Reading ends early, with what was read so far, once ``stop()`` is true. Raises
    ConfigurationError when there is no such topic.
    """
    found = ReportInput(TopicNames(kafka.topic_prefix).resolve(topic), max_trajectories)
    decoder = RecordDecoder(kafka)
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        async for message in iter_records(consumer, found.topic, since):
            if stop():
                found.stopped = True
                break
            found.read += 1
            record = await decoder.decode(message.value or b"")
            if record is None:
                found.undecodable += 1
                continue
            pair = exportable(record)
            if pair is None:
                found.other += 1
                continue
            found.add(pair[1] if pair[1] is not None else pair[0])
    finally:
        await consumer.stop()
        await decoder.close()
    return found


async def read_calls(
    kafka: KafkaSettings, records: Sequence[Reportable], since: datetime | None = None
) -> dict[str, list[CallFacts]]:
    """The timings of the shown trajectories' calls, from the events topic."""
    sessions = {(r.trajectory if isinstance(r, Scored) else r).session_id for r in records}
    if not sessions:
        return {}
    found = await read_session_calls(kafka, since=since, sessions=sessions)
    return {sid: [CallFacts.of(c) for c in calls] for sid, calls in found.calls.items()}


def report_data(
    found: ReportInput,
    texts: TokenTexts,
    calls: dict[str, list[CallFacts]],
    *,
    notes: Sequence[str],
    generated: str,
    tokens_per_segment: int = 4000,
) -> dict[str, Any]:
    """The data the front end shows from a report: the live API's answers, gathered."""
    views: dict[str, Any] = {}
    for record in found.records:
        trajectory = record.trajectory if isinstance(record, Scored) else record
        views[trajectory.trajectory_id] = trajectory_view(
            record,
            texts,
            calls.get(trajectory.session_id, []),
            topic=found.topic,
            cap=tokens_per_segment,
        )
    return {
        "generated": generated,
        "notes": list(notes),
        "fleet": None,
        "sessions": list(reversed(found.sessions.values())),
        "groups": found.rewards.page({}, 0, len(found.rewards.groups))["items"],
        "rewards": found.rewards.series(),
        "trajectories": views,
    }
