"""The export loop: read a topic without a consumer group, write its trajectories' rows.

Reads from the beginning (or ``since``) to the end offsets seen at start with
:func:`~rollstream.kafka.reading.iter_records`; with ``follow`` it reads on past
them until ``stop()``. The file is closed on every way out, so it is readable
whatever stopped the export.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from rollstream.consumers.export.rows import Row, exportable, passes, rows_of
from rollstream.consumers.export.writers import ExportFormat, ExportWriter, open_writer
from rollstream.errors import ConfigurationError, SerializationError, UnknownSchemaError
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.kafka.reading import iter_records, seek
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import AvroRecord, AvroSerializer, TopicNames
from rollstream.settings import KafkaSettings

_POLL_MS = 500


@dataclass(frozen=True)
class ExportOptions:
    """What to export, where, and how often to flush and report."""

    out: Path
    fmt: ExportFormat
    topic: str = "scored"
    min_reward: float | None = None
    since: datetime | None = None
    follow: bool = False
    #: Only these sessions' trajectories (None: every session's).
    sessions: frozenset[str] | None = None
    group_rows: int = 1000
    flush_interval_s: float = 5.0
    progress_interval_s: float = 5.0


@dataclass
class ExportReport:
    """What an export read, skipped and wrote."""

    topic: str
    out: Path
    records: int = 0
    scored: int = 0
    trajectories: int = 0
    other: int = 0  # records of another type (a SessionStarted on the wrong topic, ...)
    undecodable: int = 0
    below_min_reward: int = 0  # including those without a reward
    not_selected: int = 0  # of sessions outside ``ExportOptions.sessions``
    without_segments: int = 0
    rows: int = 0

    def summary(self) -> str:
        """One line for the end of the command."""
        return (
            f"{self.rows} rows into {self.out} from {self.records} records of {self.topic} "
            f"({self.scored} scored, {self.trajectories} trajectories); skipped: "
            f"{self.below_min_reward} below --min-reward, {self.not_selected} not selected, "
            f"{self.without_segments} without "
            f"segments, {self.other} of other types, {self.undecodable} undecodable"
        )


async def export(
    kafka: KafkaSettings,
    options: ExportOptions,
    stop: Callable[[], bool] = lambda: False,
    progress: Callable[[str], None] = print,
) -> ExportReport:
    """Export ``options.topic`` to ``options.out``; see the module docstring."""
    topic = TopicNames(kafka.topic_prefix).resolve(options.topic)
    report = ExportReport(topic, options.out)
    decoder = RecordDecoder(kafka)
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        if not await topic_partitions(consumer, topic):
            raise ConfigurationError(f"no topic {topic}")
        writer = open_writer(
            options.out,
            options.fmt,
            group_rows=options.group_rows,
            flush_interval_s=options.flush_interval_s,
        )
        try:
            await _copy(consumer, topic, options, decoder, writer, report, stop, progress)
        finally:
            writer.close()
            report.rows = writer.rows_written
    finally:
        await consumer.stop()
        await decoder.close()
    return report


async def _copy(
    consumer: AIOKafkaConsumer,
    topic: str,
    options: ExportOptions,
    decoder: RecordDecoder,
    writer: ExportWriter,
    report: ExportReport,
    stop: Callable[[], bool],
    progress: Callable[[str], None],
) -> None:
    last_progress = time.monotonic()
    caught_up = False
    messages = _messages(consumer, topic, options, stop)
    async with contextlib.aclosing(messages):
        async for message in messages:
            if message is not None:
                record = await decoder.decode(message.value or b"")
                writer.write(record_rows(record, options.min_reward, report, options.sessions))
            elif not caught_up:
                caught_up = True
                progress(
                    f"export: caught up at {report.records} records, {writer.rows_written} "
                    "rows written; following new records until stopped"
                )
            now = time.monotonic()
            writer.tick(now)
            if now - last_progress >= options.progress_interval_s:
                last_progress = now
                progress(
                    f"export: {report.records} records read, {writer.rows_written} rows written"
                )
            if stop():
                break


def record_rows(
    record: AvroRecord | None,
    min_reward: float | None,
    report: ExportReport,
    sessions: frozenset[str] | None = None,
) -> list[Row]:
    """The rows of one decoded record (None: undecodable) to write, counting it in ``report``."""
    report.records += 1
    if record is None:
        report.undecodable += 1
        return []
    found = exportable(record)
    if found is None:
        report.other += 1
        return []
    trajectory, scored = found
    if sessions is not None and trajectory.session_id not in sessions:
        report.not_selected += 1
        return []
    if scored is None:
        report.trajectories += 1
    else:
        report.scored += 1
    if not passes(scored, min_reward):
        report.below_min_reward += 1
        return []
    if not trajectory.segments:
        report.without_segments += 1
        return []
    try:
        return rows_of(trajectory, scored)
    except SerializationError:  # a corrupt messages blob
        report.undecodable += 1
        return []


async def _messages(
    consumer: AIOKafkaConsumer, topic: str, options: ExportOptions, stop: Callable[[], bool]
) -> AsyncGenerator[ConsumerRecord | None]:
    """The records up to the end seen at start or, following, every record until ``stop()``.

    While following, None stands for a poll that found nothing new, so the caller flushes on
    time and sees a stop even when nothing is written to the topic.
    """
    if not options.follow:
        async for message in iter_records(consumer, topic, options.since):
            yield message
        return
    # Not iter_records then: it drops what a poll returns past the end seen at start, which
    # a follower must keep.
    tps = await topic_partitions(consumer, topic)
    if not tps:
        raise ConfigurationError(f"no topic {topic}")
    consumer.assign(tps)
    await seek(consumer, tps, options.since)
    while not stop():
        batches = await consumer.getmany(timeout_ms=_POLL_MS)
        for batch in batches.values():
            for message in batch:
                if message.value is not None:
                    yield message
        if not batches:
            yield None


class RecordDecoder:
    """Decodes records, learning a newer writer's schema from the schema store once."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self.serializer = AvroSerializer()
        self._store: SchemaStore | None = None
        self._refreshed_for: set[bytes] = set()

    async def decode(self, value: bytes) -> AvroRecord | None:
        """The record, or None when it cannot be decoded."""
        try:
            return self.serializer.decode(value)
        except UnknownSchemaError as exc:
            if exc.fingerprint in self._refreshed_for:
                return None
            self._refreshed_for.add(exc.fingerprint)
            if self._store is None:
                self._store = SchemaStore(self.kafka, self.serializer.registry)
                await self._store.start()
            await self._store.refresh()
        except SerializationError:
            return None
        try:
            return self.serializer.decode(value)
        except SerializationError:
            return None

    async def close(self) -> None:
        """Close the schema store's clients if it was needed."""
        if self._store is not None:
            await self._store.stop()
