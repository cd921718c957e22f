"""Agent sessions of thousands of calls through the real reconstructor: one trajectory each.

A session of several hundred calls used to be dead-lettered: resolving its delta-encoded
requests recursed once per call (RecursionError). Here sessions of 2,000 and 10,000 calls whose
context grows to ~100k tokens (prompts and upstream requests delta-encoded against the previous
call, as the interceptor writes them) are published to a real events topic, then their
SessionEnded; the reconstructor runs as its own process (``python -m rollstream reconstruct``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from rollstream.dev.bench.long_sessions import LongSession, LongShape
from rollstream.schemas import (
    AvroSerializer,
    DeadLetter,
    TopicNames,
    Trajectory,
    TrajectoryStatus,
    decompress_json,
)
from rollstream.settings import KafkaSettings
from tests.chaos.pipeline import Service, service_env
from tests.conftest import ProducerFactory
from tests.fault_table import ChaosReport
from tests.kafka_reading import read_records

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SIZES = (2_000, 10_000)
FINAL_TOKENS = 100_000


async def _publish(producer: AIOKafkaProducer, topic: str, session: LongSession) -> int:
    """Every record of the session, in order, on its key; how many."""
    serializer = AvroSerializer()
    key = session.session_id.encode()
    futures = [
        await producer.send(topic, serializer.encode(record), key=key)
        for record in session.records()
    ]
    for future in futures:
        await future
    return len(futures)


async def test_sessions_of_thousands_of_calls_become_one_complete_trajectory_each(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    names = rollstream_topics
    service = Service(
        "reconstruct",
        ["reconstruct", "--strategy", "prefix_merge", "--group", "long"],
        service_env(kafka_settings, tmp_path / "state"),
        tmp_path / "reconstruct.log",
    )
    sessions = [
        LongSession(f"long-{n}", LongShape(calls=n, final_tokens=FINAL_TOKENS), seed=n)
        for n in SIZES
    ]
    producer = await producer_factory()
    service.start()
    try:
        began = time.monotonic()
        records = sum([await _publish(producer, names.events, s) for s in sessions])
        trajectories = await read_records(
            kafka_settings, names.trajectories, Trajectory, len(sessions), timeout=150, settle_s=2
        )
        elapsed = time.monotonic() - began
        letters = await read_records(kafka_settings, names.deadletters, DeadLetter, 0, settle_s=1.0)
        assert service.alive(), service.tail()
    finally:
        service.stop()
    by_session = {t.session_id: t for t in trajectories}
    for session in sessions:
        calls = session.shape.calls
        trajectory = by_session.get(session.session_id)
        assert trajectory is not None, service.tail()
        assert trajectory.status is TrajectoryStatus.COMPLETE
        assert (trajectory.stats.calls, trajectory.stats.calls_used) == (calls, calls)
        (segment,) = trajectory.segments
        assert segment.input_ids.data == session.context  # every token, in order
        assert len(segment.input_ids) == session.shape.last_context_tokens >= 0.99 * FINAL_TOKENS
        assert len(segment.call_ids) == calls
        assert trajectory.final_text == f"step {calls - 1}"
        assert trajectory.messages is not None
        assert len(decompress_json(trajectory.messages)) == 2 * calls + 1
    assert letters == [], [letter.error_message for letter in letters]
    duplicated = len(trajectories) - len(by_session)
    assert duplicated == 0
    chaos_report(
        fault="sessions of 2,000 and 10,000 calls (reconstructor)",
        load=f"{records:,} records, contexts to {FINAL_TOKENS // 1000}k tokens, {elapsed:.0f} s",
        lost=len(sessions) - len(by_session),
        duplicated=duplicated,
        errors=f"0; {len(letters)} dead-lettered",
    )
