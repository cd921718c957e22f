"""The scorer service against a real broker: the right rewards, once each, through crashes."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from rollstream.consumers.score.service import Scorer
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.kafka.clients import behind, make_consumer, topic_partitions
from rollstream.kafka.parts import split
from rollstream.schemas import (
    RECORD_BUDGET_BYTES,
    AvroSerializer,
    EvaluatorSpec,
    Scored,
    SessionStatus,
    TopicNames,
    Trajectory,
)
from rollstream.schemas.deadletter import DeadLetter
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.kafka_reading import parts_written, read_records
from tests.schemas.samples import TASK, TRAJECTORY, oversized_segment

pytestmark = pytest.mark.integration


def _trajectory(
    name: str,
    evaluator: EvaluatorSpec | None,
    *,
    with_task: bool = True,
    status: SessionStatus = SessionStatus.COMPLETED,
    group: str = "g1",
) -> Trajectory:
    task = TASK.model_copy(update={"evaluator": evaluator, "group_id": group})
    return TRAJECTORY.model_copy(
        update={
            "trajectory_id": name,
            "session_id": f"s-{name}",
            "group_id": group,
            "task": task if with_task else None,
            "session_status": status,
        }
    )


async def _send(producer: AIOKafkaProducer, topic: str, trajectories: Iterable[Trajectory]) -> None:
    serializer = AvroSerializer()
    for trajectory in trajectories:
        await producer.send(topic, serializer.encode(trajectory), key=trajectory.group_id.encode())
    await producer.flush()


async def _keys(kafka: KafkaSettings, topic: str, count: int) -> list[bytes | None]:
    consumer = make_consumer(kafka)
    await consumer.start()
    keys: list[bytes | None] = []
    try:
        tps = await topic_partitions(consumer, topic)
        assert tps
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        async with asyncio.timeout(30):
            while len(keys) < count:
                for messages in (await consumer.getmany(timeout_ms=300)).values():
                    keys += [m.key for m in messages]
    finally:
        await consumer.stop()
    return keys


@pytest.fixture
async def scorer(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> AsyncIterator[Scorer]:
    settings = ScoreSettings(work_root=tmp_path / "work", evaluator_timeout_s=30)
    stop = asyncio.Event()
    async with Scorer(settings, kafka_settings) as service:
        task = asyncio.create_task(service.run(stop))
        yield service
        stop.set()
        await task


async def test_each_trajectory_is_scored_once_with_its_evaluators_reward(
    scorer: Scorer,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    producer = await producer_factory()
    # The sample trajectory's final text is "ok"; its task's workspace is one inline file.
    expected: dict[str, tuple[float | None, str, str | None]] = {
        "exact-yes": (1.0, "exact_match", None),
        "exact-no": (0.0, "exact_match", None),
        "regex-yes": (1.0, "regex", None),
        "default-completed": (1.0, "session_completed", None),
        "default-failed": (0.0, "session_completed", None),
        "no-task": (1.0, "session_completed", None),
        "unknown": (None, "llm_judge", "unknown evaluator"),
        "python-raises": (None, "python", "raised ValueError: the grader broke"),
        "command-passes": (1.0, "command", None),
        "command-fails": (0.0, "command", None),
    }
    trajectories = [
        _trajectory("exact-yes", EvaluatorSpec(kind="exact_match", config={"expected": "ok"})),
        _trajectory("exact-no", EvaluatorSpec(kind="exact_match", config={"expected": "no"})),
        _trajectory(
            "regex-yes", EvaluatorSpec(kind="regex", config={"pattern": "^O", "flags": "i"})
        ),
        _trajectory("default-completed", None, group="g2"),
        _trajectory("default-failed", None, status=SessionStatus.FAILED, group="g2"),
        _trajectory("no-task", None, with_task=False, group="g3"),
        _trajectory("unknown", EvaluatorSpec(kind="llm_judge")),
        _trajectory(
            "python-raises",
            EvaluatorSpec(
                kind="python", config={"function": "tests.consumers.score.functions:explodes"}
            ),
        ),
        _trajectory(
            "command-passes",
            EvaluatorSpec(kind="command", config={"command": "grep -q 'print(1)' main.py"}),
        ),
        _trajectory("command-fails", EvaluatorSpec(kind="command", config={"command": "exit 3"})),
    ]
    # The sample task's setup (pip install) is not needed here; its diff is not a git diff.
    trajectories = [
        t.model_copy(
            update={
                "artifacts": [],
                "task": t.task.model_copy(update={"setup": []}) if t.task else None,
            }
        )
        for t in trajectories
    ]
    # Poison first: an undecodable record and a record that is not a trajectory.
    serializer = AvroSerializer()
    await producer.send(rollstream_topics.trajectories, b"\xc3\x01garbage", key=b"g1")
    await producer.send(rollstream_topics.trajectories, serializer.encode(TASK), key=b"g1")
    await _send(producer, rollstream_topics.trajectories, trajectories)

    scored = await read_records(
        kafka_settings, rollstream_topics.scored, Scored, len(trajectories), settle_s=1.5
    )
    by_id = {s.trajectory.trajectory_id: s for s in scored}
    assert len(scored) == len(by_id) == len(expected)
    for name, (reward, evaluator, error) in expected.items():
        record = by_id[name]
        assert (record.reward, record.evaluator) == (reward, evaluator), name
        if error is None:
            assert record.error is None, (name, record.error)
        else:
            assert record.error is not None and error in record.error, name
        assert record.trajectory == next(t for t in trajectories if t.trajectory_id == name)
    assert by_id["command-fails"].details["exit_code"] == "3"
    keys = await _keys(kafka_settings, rollstream_topics.scored, len(scored))
    assert collections.Counter(keys) == collections.Counter(
        t.group_id.encode() for t in trajectories
    )  # keyed by group id

    letters = await read_records(
        kafka_settings, rollstream_topics.deadletters, DeadLetter, 2, settle_s=1.0
    )
    assert [(d.value, d.error_type) for d in sorted(letters, key=lambda d: d.offset)] == [
        (b"\xc3\x01garbage", "SerializationError"),
        (serializer.encode(TASK), "UnexpectedRecordError"),
    ]
    assert {d.consumer_group for d in letters} == {"scorer"}
    assert {d.source_topic for d in letters} == {rollstream_topics.trajectories}
    assert scorer.metrics.scored == len(expected) and scorer.metrics.dead_letters == 2


def _spawn(kafka_settings: KafkaSettings, work_root: Path, log: Path) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "ROLLSTREAM_SCORE_MAX_BATCH_RECORDS": "4",
        "ROLLSTREAM_SCORE_WORK_ROOT": str(work_root),
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rollstream", "score", "--concurrency", "2"],
            env=env,
            stdout=out,
            stderr=out,
        )


async def _count_scored(kafka_settings: KafkaSettings, topic: str) -> int:
    """Scored records a read_committed reader sees now."""
    consumer = make_consumer(kafka_settings)
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic)
        assert tps
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # the last stable offsets, read_committed
        count = 0
        async with asyncio.timeout(30):
            while await behind(consumer, ends):
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    count += len(messages)
        return count
    finally:
        await consumer.stop()


async def test_sigkilled_mid_run_every_trajectory_still_has_exactly_one_score(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    total = 40
    slow = EvaluatorSpec(kind="command", config={"command": "sleep 0.2"})
    trajectories = [
        _trajectory(f"k{i}", slow, group=f"g{i // 4}").model_copy(
            update={
                "artifacts": [],
                "task": TASK.model_copy(update={"setup": [], "evaluator": slow}),
            }
        )
        for i in range(total)
    ]
    producer = await producer_factory()
    await _send(producer, rollstream_topics.trajectories, trajectories)
    log = tmp_path / "score.log"
    process = _spawn(kafka_settings, tmp_path / "work", log)
    try:
        committed = 0
        async with asyncio.timeout(90):
            while committed < 4:  # some batches are committed
                await asyncio.sleep(0.2)
                committed = await _count_scored(kafka_settings, rollstream_topics.scored)
        process.send_signal(signal.SIGKILL)
        process.wait()
        # What the killed run committed (its open transaction is aborted, never visible).
        committed = await _count_scored(kafka_settings, rollstream_topics.scored)
        assert 0 < committed < total, log.read_text()[-3000:]
        process = _spawn(kafka_settings, tmp_path / "work", log)
        scored = await read_records(
            kafka_settings, rollstream_topics.scored, Scored, total, timeout=120, settle_s=2.0
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    counts = collections.Counter(s.trajectory.trajectory_id for s in scored)
    assert set(counts) == {f"k{i}" for i in range(total)}, log.read_text()[-3000:]
    assert max(counts.values()) == 1, [t for t, n in counts.items() if n > 1]
    assert {s.reward for s in scored} == {1.0}


async def test_instances_share_the_partitions_and_a_rebalance_duplicates_nothing(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    """A rebalance cancels the batch being evaluated; its partitions' next owner rescores it."""
    slow = EvaluatorSpec(kind="command", config={"command": "sleep 0.2"})
    task = TASK.model_copy(update={"setup": [], "evaluator": slow})
    producer = await producer_factory()
    produced: list[str] = []
    enough = asyncio.Event()

    async def stream() -> None:
        # Waves over every partition (a key each), faster than one instance scores them (so
        # a rebalance finds batches being evaluated), until the second instance has had work.
        while len(produced) < 200 and not (enough.is_set() and len(produced) >= 40):
            wave = [f"m{len(produced) + i}" for i in range(8)]
            await _send(
                producer,
                rollstream_topics.trajectories,
                [
                    _trajectory(name, slow, group=f"g-{name}").model_copy(
                        update={"artifacts": [], "task": task}
                    )
                    for name in wave
                ],
            )
            produced.extend(wave)
            await asyncio.sleep(1.0)

    def instance(name: str) -> Scorer:
        settings = ScoreSettings(max_batch_records=4, work_root=tmp_path / name)
        return Scorer(settings, kafka_settings)

    first, second = instance("a"), instance("b")
    stops = [asyncio.Event(), asyncio.Event()]
    streaming = asyncio.create_task(stream())
    await first.start()
    runs = [asyncio.create_task(first.run(stops[0]))]
    try:
        for _ in range(300):  # the first is scoring (and has committed) when the second joins
            if first.metrics.scored:
                break
            await asyncio.sleep(0.1)
        await second.start()
        runs.append(asyncio.create_task(second.run(stops[1])))
        for _ in range(600):  # until the second has committed a batch of its own
            if second.metrics.scored:
                break
            await asyncio.sleep(0.1)
        enough.set()
        stops[0].set()  # the first leaves mid-batch: its partitions move
        await runs[0]
        await first.stop()
        await streaming
        scored = await read_records(
            kafka_settings,
            rollstream_topics.scored,
            Scored,
            len(produced),
            timeout=90,
            settle_s=2.0,
        )
    finally:
        streaming.cancel()
        for stop in stops:
            stop.set()
        await asyncio.gather(*runs, return_exceptions=True)
        await first.stop()
        await second.stop()
    counts = collections.Counter(s.trajectory.trajectory_id for s in scored)
    assert set(counts) == set(produced)
    assert max(counts.values()) == 1, [t for t, n in counts.items() if n > 1]
    assert first.metrics.scored > 0 and second.metrics.scored > 0  # both worked
    assert first.metrics.scored + second.metrics.scored == len(produced)
    # Each rebalance (the second joining, the first leaving) found a batch being evaluated.
    assert first.metrics.dropped_batches + second.metrics.dropped_batches >= 1


async def test_records_over_the_budget_are_read_and_written_in_parts_and_the_rest_flows(
    scorer: Scorer,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """Between ordinary trajectories on one partition: one whose Scored record passes the budget
    (its messages fill it, its evaluator adds 8 KB of details) and one whose segments alone do,
    written in parts. Each is scored whole, nothing left out, its Scored record in parts; the
    scorer goes on with the rest. Before, the first lost its messages and the second was
    dead-lettered."""
    verbose = EvaluatorSpec(
        kind="python", config={"function": "tests.consumers.score.functions:verbose"}
    )
    base = _trajectory("x", verbose).model_copy(
        update={
            "artifacts": [],
            "task": TASK.model_copy(update={"setup": [], "evaluator": verbose}),
        }
    )
    serializer = AvroSerializer()
    ordinary = [base.model_copy(update={"trajectory_id": f"ok-{i}"}) for i in range(2)]
    # Filled up to 1 KB under the budget with its messages: its Scored record is over.
    chatty = base.model_copy(update={"trajectory_id": "chatty", "messages": b""})
    room = RECORD_BUDGET_BYTES - 1024 - len(serializer.encode(chatty))
    chatty = chatty.model_copy(update={"messages": os.urandom(room)})
    segment = oversized_segment()
    bulky = base.model_copy(update={"trajectory_id": "bulky", "segments": [segment]})
    producer = await producer_factory()
    for trajectory in [ordinary[0], chatty, bulky, ordinary[1]]:
        for value, headers in split(b"g", serializer.encode(trajectory)):
            await producer.send(
                rollstream_topics.trajectories,
                value,
                key=b"g",
                partition=0,
                headers=list(headers) or None,
            )
    await producer.flush()

    scored = await read_records(
        kafka_settings, rollstream_topics.scored, Scored, 4, timeout=90, settle_s=1.5
    )
    by_id = {s.trajectory.trajectory_id: s for s in scored}
    assert sorted(by_id) == ["bulky", "chatty", "ok-0", "ok-1"] and len(scored) == 4
    assert by_id["chatty"].trajectory == chatty and by_id["chatty"].reward == 1.0
    assert by_id["chatty"].details["log"].startswith("checked")
    assert by_id["bulky"].trajectory.segments == [segment]
    assert (scorer.metrics.in_parts, scorer.metrics.dead_letters) == (2, 0)
    assert await parts_written(kafka_settings, rollstream_topics.scored) == 4
