"""Poison records amid good ones in every topic a consumer reads: skipped, never fatal.

The same poison in each topic: bytes that are no record at all, an empty value, a record cut
in half, a record naming a schema nobody knows, a tombstone (no value) and a well-formed record
of a type that does not belong there. Good records go before and after them on the same
partition, so the consumer must get past the poison to do its work.

Where each consumer puts what it cannot use (asserted below):
- reconstructor (events) and scorer (trajectories): dead-letter topic, with the source topic,
  partition and offset, in the same transaction as their output. The reconstructor ignores a
  well-formed record of another type (counted, not dead-lettered): events may carry more types.
- trainer client (scored): counts them (``metrics.undecodable``); it has no producer.
- rollout node (tasks): dead-letter topic (sent before its offsets commit past them).
- export and report (any topic): count them as undecodable or "of other types".
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from rollstream.consumers.console.report import read_report_input
from rollstream.consumers.export.run import ExportOptions, export
from rollstream.consumers.reconstruct.service import Reconstructor
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.consumers.score.service import Scorer
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.consumers.trainer import Group, TrainerSettings, TrajectoryStream
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.host import free_port
from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    DeadLetter,
    Scored,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    TopicNames,
    Trajectory,
)
from rollstream.schemas.serializer import HEADER_LEN, MAGIC
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import ConsumerFactory, ProducerFactory
from tests.consumers.trainer.records import group_of
from tests.fault_table import ChaosReport
from tests.kafka_reading import read_records
from tests.producers.node.helpers import command_task
from tests.schemas.samples import CALL, SCORED, STARTED, TASK, TRAJECTORY

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SHAPE = SyntheticShape(turns=3, system_tokens=32, tool_result_tokens=8, completion_tokens=4)
SERIALIZER = AvroSerializer()
Value = bytes | None


def poison(valid: AvroRecord, wrong_type: AvroRecord) -> dict[str, Value]:
    """Poison for a topic whose records look like ``valid``; ``wrong_type`` belongs elsewhere."""
    good = SERIALIZER.encode(valid)
    return {
        "garbage": b"\x00\x01 this is not a record",
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "unknown schema": MAGIC + b"\xde\xad\xbe\xef\xde\xad\xbe\xef" + good[HEADER_LEN:],
        "tombstone": None,
        "wrong type": SERIALIZER.encode(wrong_type),
    }


async def place(
    producer: AIOKafkaProducer, topic: str, values: Sequence[AvroRecord | Value], key: bytes
) -> list[int]:
    """Write the values (records are encoded) to partition 0 in order; their offsets."""
    futures = []
    for value in values:
        raw = SERIALIZER.encode(value) if isinstance(value, AvroRecord) else value
        futures.append(await producer.send(topic, raw, key=key, partition=0))
    return [(await future).offset for future in futures]


async def dead_letters(kafka: KafkaSettings, names: TopicNames, count: int) -> list[DeadLetter]:
    """Exactly ``count`` dead letters (read on a while to see any extra)."""
    letters = await read_records(kafka, names.deadletters, DeadLetter, count, settle_s=1.5)
    assert len(letters) == count
    return letters


def assert_letters(
    letters: list[DeadLetter], topic: str, poisoned: dict[str, Value], offsets: dict[str, int]
) -> None:
    """Each poison record dead-lettered once, with where it came from and its bytes."""
    by_offset = {letter.offset: letter for letter in letters}
    assert sorted(by_offset) == sorted(offsets[name] for name in poisoned)
    for name, value in poisoned.items():
        letter = by_offset[offsets[name]]
        assert (letter.source_topic, letter.partition) == (topic, 0), name
        assert letter.value == value and letter.error_type, name


async def test_the_reconstructor_dead_letters_poison_events_and_goes_on(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    chaos_report: ChaosReport,
) -> None:
    names = rollstream_topics
    sessions = [synthetic_session(f"poison-s{i}", SHAPE, group_id="g", seed=i) for i in range(4)]
    bad = poison(CALL, TRAJECTORY)
    producer = await producer_factory()
    settings = ReconstructSettings(strategy="prefix_merge", wait_for_calls_s=1.0, idle_timeout_s=60)
    stop = asyncio.Event()
    async with Reconstructor(settings, kafka_settings) as service:
        task = asyncio.create_task(service.run(stop))
        first = [r for s in sessions[:2] for r in s.records]
        await place(producer, names.events, first, b"k")
        placed = await place(producer, names.events, list(bad.values()), b"k")
        offsets = dict(zip(bad, placed, strict=True))
        await place(producer, names.events, [r for s in sessions[2:] for r in s.records], b"k")
        trajectories = await read_records(
            kafka_settings, names.trajectories, Trajectory, len(sessions), settle_s=1.0
        )
        ignored = service.partitions[TopicPartition(names.events, 0)].ignored_records
        stop.set()
        await task
    assert sorted(t.session_id for t in trajectories) == [f"poison-s{i}" for i in range(4)]
    undecodable = {k: v for k, v in bad.items() if k != "wrong type"}
    letters = await dead_letters(kafka_settings, names, len(undecodable))
    assert_letters(letters, names.events, undecodable, offsets)
    assert {letter.consumer_group for letter in letters} == {settings.group_id}
    assert ignored == 1  # the Trajectory on the events topic: seen and skipped
    chaos_report(
        fault="poison records in events (reconstructor)",
        load=f"{len(bad)} poison amid {len(sessions)} sessions",
        lost=len(sessions) - len(trajectories),
        duplicated=0,
        errors=f"0; {len(letters)} dead-lettered, 1 foreign record ignored",
    )


async def test_the_scorer_dead_letters_poison_trajectories_and_goes_on(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    names = rollstream_topics
    good = [
        TRAJECTORY.model_copy(
            update={"trajectory_id": f"poison-t{i}", "session_id": f"s{i}", "task": None}
        )
        for i in range(4)
    ]
    bad = poison(TRAJECTORY, STARTED)
    producer = await producer_factory()
    settings = ScoreSettings(work_root=tmp_path / "work")
    stop = asyncio.Event()
    async with Scorer(settings, kafka_settings) as service:
        task = asyncio.create_task(service.run(stop))
        await place(producer, names.trajectories, good[:2], b"g")
        placed = await place(producer, names.trajectories, list(bad.values()), b"g")
        offsets = dict(zip(bad, placed, strict=True))
        await place(producer, names.trajectories, good[2:], b"g")
        scored = await read_records(kafka_settings, names.scored, Scored, len(good), settle_s=1.0)
        stop.set()
        await task
    assert sorted(s.trajectory.trajectory_id for s in scored) == [f"poison-t{i}" for i in range(4)]
    letters = await dead_letters(kafka_settings, names, len(bad))
    assert_letters(letters, names.trajectories, bad, offsets)
    wrong = next(letter for letter in letters if letter.offset == offsets["wrong type"])
    assert wrong.error_type == "UnexpectedRecordError"
    chaos_report(
        fault="poison records in trajectories (scorer)",
        load=f"{len(bad)} poison amid {len(good)} trajectories",
        lost=len(good) - len(scored),
        duplicated=0,
        errors=f"0; {len(letters)} dead-lettered",
    )


async def test_the_trainer_client_counts_poison_scored_records_and_goes_on(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    chaos_report: ChaosReport,
) -> None:
    names = rollstream_topics
    bad = poison(SCORED, TASK)
    producer = await producer_factory()
    first, last = group_of("poison-a", 3), group_of("poison-b", 3)
    await place(producer, names.scored, first, b"g")
    await place(producer, names.scored, list(bad.values()), b"g")
    end = (await place(producer, names.scored, last, b"g"))[-1] + 1
    groups: list[Group] = []
    async with TrajectoryStream(TrainerSettings(), "poison-trainer", kafka_settings) as stream:
        async with asyncio.timeout(60):
            async for group in stream.groups():
                groups.append(group)
                if group.group_id == "poison-b":
                    break
        committed = await stream.commit()
        undecodable = stream.metrics.undecodable
    assert [g.group_id for g in groups] == ["poison-a", "poison-b"]
    # Every poison record counted (a tombstone too), and the commit passes them all.
    assert undecodable == len(bad)
    assert committed[(names.scored, 0)] == end
    chaos_report(
        fault="poison records in scored (trainer client)",
        load=f"{len(bad)} poison amid 2 groups of 3",
        lost=2 - len(groups),
        duplicated=0,
        errors=f"0; {undecodable} counted undecodable, committed past (no dead-letter topic)",
    )


async def test_the_node_dead_letters_poison_tasks_and_runs_the_good_ones(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    names = rollstream_topics
    tasks = [command_task("true", task_id=f"poison-task-{i}", group_id="g") for i in range(2)]
    bad = poison(tasks[0], CALL)
    settings = NodeSettings(
        port=0,
        node_id="poison-node",
        work_root=tmp_path / "sessions",
        interceptor_admin=f"http://127.0.0.1:{free_port()}",  # no calls are made
    )
    paths = StatePaths(state_dir=tmp_path / "state")
    producer = await producer_factory()
    reader = await consumer_factory(group_id=settings.group)  # reads the node's offsets only
    tasks_tp = TopicPartition(names.tasks, 0)
    async with Node(settings, kafka_settings, PublisherSettings(), paths) as node:
        await place(producer, names.tasks, tasks[:1], b"t")
        placed = await place(producer, names.tasks, list(bad.values()), b"t")
        offsets = dict(zip(bad, placed, strict=True))
        end = (await place(producer, names.tasks, tasks[1:], b"t"))[-1] + 1
        events = await read_records(kafka_settings, names.events, AvroRecord, 4, settle_s=1.0)
        # Committed past the poison once the last task ended: a restart would not read it.
        async with asyncio.timeout(30):
            while await reader.committed(tasks_tp) != end:  # noqa: ASYNC110 (the broker's)
                await asyncio.sleep(0.1)
    ended = [e for e in events if isinstance(e, SessionEnded)]
    started = [e for e in events if isinstance(e, SessionStarted)]
    assert sorted(e.task_id for e in started) == ["poison-task-0", "poison-task-1"]
    assert sorted(e.task_id for e in ended) == ["poison-task-0", "poison-task-1"]
    assert all(e.status is SessionStatus.COMPLETED for e in ended)
    assert node.tasks_seen == 2  # the poison ran nothing
    letters = await dead_letters(kafka_settings, names, len(bad))
    assert_letters(letters, names.tasks, bad, offsets)
    assert {letter.consumer_group for letter in letters} == {settings.group}
    chaos_report(
        fault="poison records in tasks (node)",
        load=f"{len(bad)} poison amid 2 tasks",
        lost=2 - len(ended),
        duplicated=0,
        errors=f"0; {len(letters)} dead-lettered, committed past",
    )


async def test_export_and_report_skip_and_count_poison(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    names = rollstream_topics
    good = [
        SCORED.model_copy(
            update={"trajectory": TRAJECTORY.model_copy(update={"trajectory_id": f"t{i}"})}
        )
        for i in range(4)
    ]
    bad = poison(SCORED, TASK)
    producer = await producer_factory()
    await place(producer, names.scored, good[:2], b"g")
    await place(producer, names.scored, list(bad.values()), b"g")
    await place(producer, names.scored, good[2:], b"g")

    out = tmp_path / "scored.jsonl"
    exported = await export(kafka_settings, ExportOptions(out, "jsonl"), progress=lambda _: None)
    report = await read_report_input(kafka_settings, "scored")
    rows_per_record = len(TRAJECTORY.segments)
    assert exported.rows == len(good) * rows_per_record
    assert len(out.read_text().splitlines()) == exported.rows
    # A tombstone is no record: skipped before decoding. The rest: 4 undecodable, 1 foreign.
    assert (exported.scored, exported.undecodable, exported.other) == (4, 4, 1)
    assert (len(report.records), report.undecodable, report.other) == (4, 4, 1)
    chaos_report(
        fault="poison records in scored (export, report)",
        load=f"{len(bad)} poison amid {len(good)} scored records",
        lost=len(good) - exported.scored,
        duplicated=0,
        errors="0; 4 undecodable + 1 foreign counted and skipped",
    )
