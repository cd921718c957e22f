"""Reading a report's records from a topic, as ``rollstream export`` does (no consumer group).

The first ``max_trajectories`` scored records or trajectories are kept whole; of the rest only
their facts are kept, so memory stays bounded however long the run was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from rollstream.consumers.export import exportable

# The export's decoder learns a newer writer's schema from the schema store once.
from rollstream.consumers.export.run import RecordDecoder
from rollstream.dev.report.facts import Reportable, TrajectoryFacts, facts_of
from rollstream.kafka.clients import make_consumer
from rollstream.kafka.reading import iter_records
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings


@dataclass
class ReportInput:
    """What a report shows (``records``), counts only (``more``), and what was skipped."""

    topic: str
    records: list[Reportable] = field(default_factory=list)
    more: list[TrajectoryFacts] = field(default_factory=list)
    read: int = 0
    other: int = 0  # records of another type
    undecodable: int = 0
    stopped: bool = False  # stopped before the end of the topic

    def notes(self) -> list[str]:
        """Lines for the page's header and the command's output."""
        kept = len(self.records) + len(self.more)
        return [
            f"{self.read:,} records read from {self.topic}: {kept:,} trajectories "
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
    full = TopicNames(kafka.topic_prefix).resolve(topic)
    found = ReportInput(full)
    decoder = RecordDecoder(kafka)
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        async for message in iter_records(consumer, full, since):
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
            reportable: Reportable = pair[1] if pair[1] is not None else pair[0]
            if len(found.records) < max_trajectories:
                found.records.append(reportable)
            else:
                found.more.append(facts_of(reportable))
    finally:
        await consumer.stop()
        await decoder.close()
    return found
