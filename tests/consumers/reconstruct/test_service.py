"""The reconstructor service against a real broker: once per session, through crashes."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.service import Reconstructor
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    DeadLetter,
    SessionEnded,
    TopicNames,
)
from rollstream.schemas.trajectories import Trajectory, TrajectoryStatus
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.kafka_reading import parts_written, read_records
from tests.schemas.samples import ENDED

pytestmark = pytest.mark.integration
SHAPE = SyntheticShape(turns=4, system_tokens=64, tool_result_tokens=16, completion_tokens=8)


async def _send(producer: AIOKafkaProducer, topic: str, records: Iterable[AvroRecord]) -> None:
    serializer = AvroSerializer()
    for record in records:
        key = str(getattr(record, "session_id", "")).encode()
        await producer.send(topic, serializer.encode(record), key=key)
    await producer.flush()


@pytest.fixture
async def service(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames
) -> AsyncIterator[Reconstructor]:
    settings = ReconstructSettings(
        strategy="prefix_merge", wait_for_calls_s=1.0, idle_timeout_s=3.0
    )
    stop = asyncio.Event()
    async with Reconstructor(settings, kafka_settings) as reconstructor:
        task = asyncio.create_task(reconstructor.run(stop))
        yield reconstructor
        stop.set()
        await task


async def test_sessions_become_one_trajectory_each_with_the_right_status(
    service: Reconstructor,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    producer = await producer_factory()
    complete = [synthetic_session(f"s{i}", SHAPE, group_id=f"g{i % 2}", seed=i) for i in range(6)]
    # Interleaved, as concurrent sessions are on a partition.
    records = [r for batch in zip(*(s.records for s in complete), strict=True) for r in batch]
    # A session whose SessionEnded reports a call that never comes: incomplete after the wait.
    short = synthetic_session("short", SHAPE, seed=99)
    ended = short.records[-1]
    assert isinstance(ended, SessionEnded)
    records += [r for r in short.records[:-2]] + [ended]
    # A session that never ends: abandoned after the idle timeout.
    records += synthetic_session("silent", SHAPE, seed=7).records[:3]
    # A poison record between them.
    await _send(producer, rollstream_topics.events, records)
    await producer.send(rollstream_topics.events, b"\xc3\x01garbage", key=b"s0")
    await producer.flush()

    trajectories = await read_records(
        kafka_settings, rollstream_topics.trajectories, Trajectory, 8, settle_s=1.5
    )
    by_session = {t.session_id: t for t in trajectories}
    assert len(trajectories) == len(by_session) == 8  # one each, nothing twice
    assert by_session["short"].status is TrajectoryStatus.INCOMPLETE
    assert by_session["silent"].status is TrajectoryStatus.ABANDONED
    for session in complete:
        trajectory = by_session[session.records[0].session_id]  # type: ignore[attr-defined]
        assert trajectory.status is TrajectoryStatus.COMPLETE
        assert trajectory.group_id in {"g0", "g1"} and trajectory.strategy == "prefix_merge"
        assert len(trajectory.segments) == 1  # prompts extend each other: one segment
        calls = {c.call_id: c for c in resolve_calls(session.calls)}
        assert check_segments(trajectory.segments, calls) == []
        assert trajectory.stats.calls == SHAPE.turns

    [letter] = await read_records(
        kafka_settings, rollstream_topics.deadletters, DeadLetter, 1, settle_s=1.0
    )
    assert letter.value == b"\xc3\x01garbage" and letter.source_topic == rollstream_topics.events
    assert letter.consumer_group == "rollstream-reconstruct-prefix_merge"


def _spawn(kafka_settings: KafkaSettings, log: Path) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "ROLLSTREAM_RECONSTRUCT_WAIT_FOR_CALLS_S": "2",
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rollstream", "reconstruct", "--strategy", "tree"],
            env=env,
            stdout=out,
            stderr=out,
        )


async def test_sigkilled_repeatedly_every_session_still_has_exactly_one_trajectory(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    sessions = [
        synthetic_session(f"k{i}", SHAPE, group_id=f"g{i // 4}", seed=i) for i in range(200)
    ]
    producer = await producer_factory()
    log = tmp_path / "reconstruct.log"
    process = _spawn(kafka_settings, log)

    async def stream() -> None:
        # 20 waves of 10 sessions, records interleaved within a wave.
        for wave in range(20):
            batch = sessions[wave * 10 : (wave + 1) * 10]
            records = [r for group in zip(*(s.records for s in batch), strict=True) for r in group]
            await _send(producer, rollstream_topics.events, records)
            await asyncio.sleep(0.4)

    streaming = asyncio.create_task(stream())
    try:
        for _ in range(3):  # kill -9 mid-run, restart
            await asyncio.sleep(2.5)
            process.send_signal(signal.SIGKILL)
            process.wait()
            process = _spawn(kafka_settings, log)
        await streaming
        trajectories = await read_records(
            kafka_settings,
            rollstream_topics.trajectories,
            Trajectory,
            200,
            timeout=120,
            settle_s=1.5,
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    counts = collections.Counter(t.session_id for t in trajectories)
    assert set(counts) == {f"k{i}" for i in range(200)}, log.read_text()[-3000:]
    assert max(counts.values()) == 1, [s for s, n in counts.items() if n > 1]


async def test_instances_share_the_partitions_and_a_rebalance_duplicates_nothing(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """Scaling out is adding instances; one leaving hands its partitions over cleanly."""
    producer = await producer_factory()
    sessions = [synthetic_session(f"m{i}", SHAPE, group_id="g", seed=i) for i in range(60)]

    def instance(name: str) -> Reconstructor:
        return Reconstructor(
            ReconstructSettings(strategy="tree", wait_for_calls_s=1.0),
            kafka_settings,
        )

    first, second = instance("a"), instance("b")
    stops = [asyncio.Event(), asyncio.Event()]
    await first.start()
    await second.start()
    runs = [asyncio.create_task(first.run(stops[0])), asyncio.create_task(second.run(stops[1]))]
    try:
        for wave in range(6):
            batch = sessions[wave * 10 : (wave + 1) * 10]
            records = [r for group in zip(*(s.records for s in batch), strict=True) for r in group]
            await _send(producer, rollstream_topics.events, records)
            await asyncio.sleep(0.5)
            if wave == 2:  # the first instance leaves mid-run: its partitions move
                stops[0].set()
                await runs[0]
                await first.stop()
        trajectories = await read_records(
            kafka_settings,
            rollstream_topics.trajectories,
            Trajectory,
            60,
            timeout=90,
            settle_s=1.5,
        )
    finally:
        stops[1].set()
        await asyncio.gather(*runs, return_exceptions=True)
        await first.stop()
        await second.stop()
    counts = collections.Counter(t.session_id for t in trajectories)
    assert set(counts) == {f"m{i}" for i in range(60)}
    assert max(counts.values()) == 1
    assert first.metrics.trajectories > 0 and second.metrics.trajectories > 0  # both worked


def _run(service: Reconstructor) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(service.run(stop))


async def test_a_session_silent_past_the_idle_timeout_is_abandoned_when_read_not_after_it(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Deadlines count in the records' time: a reconstructor (re)started after a session's node
    died closes it at once, not an idle timeout later; what comes after it is logged and counted.
    """
    producer = await producer_factory()
    serializer = AvroSerializer()
    session = synthetic_session("died", SHAPE, seed=3)
    two_hours_ago = int((time.time() - 7200) * 1000)
    for record in session.records[:3]:  # started, two calls, then the node died
        await producer.send(
            rollstream_topics.events,
            serializer.encode(record),
            key=b"died",
            partition=0,
            timestamp_ms=two_hours_ago,
        )
    await producer.flush()
    settings = ReconstructSettings(
        strategy="prefix_merge", wait_for_calls_s=1.0, idle_timeout_s=3600
    )
    async with Reconstructor(settings, kafka_settings) as service:
        stop, task = _run(service)
        try:
            # Within a minute: an hour's idle timeout counted from reading them would never do.
            [trajectory] = await read_records(
                kafka_settings, rollstream_topics.trajectories, Trajectory, 1, timeout=60
            )
            assert trajectory.status is TrajectoryStatus.ABANDONED
            assert trajectory.stats.calls == 2
            caplog.set_level(logging.WARNING, "rollstream.consumers.reconstruct.service")
            # The node's last call after all, and a record of a type the topic does not carry.
            await _send_to(producer, rollstream_topics.events, [session.records[3], trajectory])
            async with asyncio.timeout(30):
                while service.metrics.late_records + service.metrics.ignored_records < 2:  # noqa: ASYNC110 (the service's counters)
                    await asyncio.sleep(0.1)
        finally:
            stop.set()
            await task
    assert (service.metrics.late_records, service.metrics.ignored_records) == (1, 1)
    assert "(1 late, 1 ignored)" in service.progress()
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("late record dropped: CallRecord of session died") for m in messages)
    assert any(m.startswith("record ignored: Trajectory at") for m in messages)


async def _send_to(producer: AIOKafkaProducer, topic: str, records: Iterable[AvroRecord]) -> None:
    serializer = AvroSerializer()
    for record in records:
        await producer.send(topic, serializer.encode(record), key=b"k", partition=0)
    await producer.flush()


async def test_a_trajectory_over_the_record_budget_goes_out_in_parts_and_reads_whole(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """A per_call session whose segments hold 2 M new tokens (18 MB, over the budget even as
    deltas) between two ordinary ones on the same partition: its trajectory goes out as several
    records in the same transaction as the others', and a reader gets it back whole, each
    segment its call's prompt and completion. Before, it was dead-lettered for its size."""
    producer = await producer_factory()
    shape = SyntheticShape(turns=21, system_tokens=64, tool_result_tokens=100_000)
    big = synthetic_session("big", shape)
    before, after = synthetic_session("before", SHAPE, seed=1), synthetic_session("after", SHAPE)
    settings = ReconstructSettings(strategy="per_call", wait_for_calls_s=1.0)
    async with Reconstructor(settings, kafka_settings) as service:
        stop, task = _run(service)
        try:
            await _send_to(
                producer, rollstream_topics.events, [*before.records, *big.records, *after.records]
            )
            trajectories = await read_records(
                kafka_settings, rollstream_topics.trajectories, Trajectory, 3, settle_s=1.5
            )
            assert not task.done()
        finally:
            stop.set()
            await task
    assert sorted(t.session_id for t in trajectories) == ["after", "before", "big"]
    [whole] = [t for t in trajectories if t.session_id == "big"]
    expected = [big.prompts[c.call_id] + c.completion_token_ids for c in big.calls]
    assert [s.input_ids for s in whole.segments] == expected
    assert service.metrics.in_parts == 1 and service.metrics.dead_letters == 0
    assert await parts_written(kafka_settings, rollstream_topics.trajectories) == 2


async def test_a_state_over_the_record_budget_is_written_in_chunks_and_read_back_whole(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """One session left open holds its partition's commit offset while 4,300 sessions end after
    it, each with a 4 KB id: the state remembers them all (17.3 MB, over 16 MiB). It
    goes out in chunks; an instance started afterwards reads it back and, re-reading from the
    open session, emits none of them twice."""
    producer = await producer_factory()
    holder = synthetic_session("holder", SHAPE)
    ended = [
        ENDED.model_copy(update={"session_id": f"{i:05d}-{'x' * 4000}", "call_count": 0})
        for i in range(4300)
    ]
    settings = ReconstructSettings(strategy="prefix_merge", wait_for_calls_s=1)
    async with Reconstructor(settings, kafka_settings) as first:
        stop, task = _run(first)
        try:
            await _send_to(producer, rollstream_topics.events, [holder.records[0], *ended])
            await read_records(
                kafka_settings, rollstream_topics.trajectories, Trajectory, len(ended), timeout=90
            )
        finally:
            stop.set()
            await task
    async with Reconstructor(settings, kafka_settings) as second:
        stop, task = _run(second)
        try:
            await _send_to(producer, rollstream_topics.events, holder.records[1:])
            trajectories = await read_records(
                kafka_settings,
                rollstream_topics.trajectories,
                Trajectory,
                len(ended) + 1,
                timeout=90,
                settle_s=2.0,
            )
        finally:
            stop.set()
            await task
    counts = collections.Counter(t.session_id for t in trajectories)
    assert len(counts) == len(ended) + 1 and max(counts.values()) == 1
    assert counts["holder"] == 1 and second.metrics.trajectories == 1
