"""A session whose per_call trajectory exceeds the record limit, between ordinary sessions.

The reconstructor (``--strategy per_call``) and the scorer run as ``python -m rollstream``
processes against the session broker, under a supervisor that restarts a process that exits
(as systemd or Kubernetes would). Synthetic sessions go to the events topic, all on one
partition: a first wave, then one session of 21 calls each adding 100k tokens (18 MB of
segments even written as deltas, over the 16 MiB record limit) interleaved with a second wave,
then a third wave. Expected: every session, the large one too, has exactly one trajectory and
one Scored record (the large one's in parts, joined by the readers), nothing is dead-lettered,
and neither process exits. Before the record budget the reconstructor's transaction aborted on
the oversized send and every restart died on it; before parts (issue 36, point 12) the large
session was dead-lettered and never reached a trainer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from rollstream.dev.synthetic import SyntheticSession, SyntheticShape, synthetic_session
from rollstream.schemas import AvroSerializer, DeadLetter, TopicNames
from rollstream.schemas.trajectories import Scored, Trajectory
from rollstream.settings import KafkaSettings
from tests.chaos.pipeline import Service, TopicReader, repeats, service_env, topic_readers
from tests.conftest import ProducerFactory
from tests.fault_table import ChaosReport

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ORDINARY = SyntheticShape(turns=4, system_tokens=64, tool_result_tokens=16, completion_tokens=8)
#: 21 calls, each adding 100k tokens to the last: 2 M new tokens (9 bytes each) as deltas.
OVERSIZED = SyntheticShape(turns=21, system_tokens=64, tool_result_tokens=100_000)
WAVE = 4


@contextmanager
def supervised(services: Iterable[Service]) -> Iterator[list[Service]]:
    """Started services, stopped (SIGTERM) afterwards."""
    started = list(services)
    try:
        for service in started:
            service.start()
        yield started
    finally:
        for service in started:
            service.stop()


async def _send(producer: AIOKafkaProducer, topic: str, sessions: list[SyntheticSession]) -> None:
    """The sessions' records interleaved, all on partition 0 (one key's partition)."""
    serializer = AvroSerializer()
    longest = max(len(s.records) for s in sessions)
    for i in range(longest):
        for session in sessions:
            if i < len(session.records):
                value = serializer.encode(session.records[i])
                await producer.send(topic, value, key=b"chaos", partition=0)
    await producer.flush()


def _holds(reader: TopicReader, count: int) -> Callable[[], bool]:
    """Whether ``reader`` has read ``count`` records yet."""
    return lambda: len(reader.records) >= count


async def _until(
    readers: list[TopicReader], services: list[Service], done: Callable[[], bool]
) -> None:
    """Read on until ``done()``, restarting what exited; a minute at most."""
    async with asyncio.timeout(60):
        while not done():
            for reader in readers:
                await reader.poll(100)
            for service in services:
                if not service.alive():
                    service.start()  # the supervisor: a crash loop shows as starts > 1


async def test_a_per_call_trajectory_over_the_record_limit_blocks_nothing(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    names = rollstream_topics
    prefix = kafka_settings.topic_prefix
    state = tmp_path / "state"
    reconstruct = Service(
        "reconstruct",
        ["reconstruct", "--strategy", "per_call"],
        service_env(
            kafka_settings,
            state,
            ROLLSTREAM_RECONSTRUCT_GROUP=f"{prefix}-reconstruct",
            ROLLSTREAM_RECONSTRUCT_WAIT_FOR_CALLS_S="2",
        ),
        tmp_path / "reconstruct.log",
    )
    score = Service(
        "score",
        ["score"],
        service_env(
            kafka_settings,
            state,
            ROLLSTREAM_SCORE_GROUP_ID=f"{prefix}-score",
            ROLLSTREAM_SCORE_WORK_ROOT=str(tmp_path / "score"),
        ),
        tmp_path / "score.log",
    )
    waves = [
        [synthetic_session(f"w{w}-s{i}", ORDINARY, seed=10 * w + i) for i in range(WAVE)]
        for w in range(3)
    ]
    big = synthetic_session("oversized", OVERSIZED, seed=99)
    ordinary = {s.calls[0].session_id for wave in waves for s in wave}
    producer = await producer_factory()
    with supervised([reconstruct, score]) as services:
        async with topic_readers(
            kafka_settings, names.trajectories, names.scored, names.deadletters
        ) as readers:
            trajectories, scored, letters = readers
            try:
                for n, wave in enumerate(waves, 1):
                    # The oversized session goes with the second wave, its records among theirs.
                    await _send(producer, names.events, [big, *wave] if n == 2 else wave)
                    await _until(readers, services, _holds(trajectories, n * WAVE))
                await _until(readers, services, _holds(scored, 3 * WAVE + 1))
                for reader in readers:
                    await reader.settle(2.0)
            except TimeoutError:
                raise AssertionError(
                    f"{len(trajectories.records)} of {3 * WAVE + 1} trajectories, "
                    f"{len(scored.records)} scores; reconstructor started "
                    f"{reconstruct.starts} times:\n{reconstruct.tail()}"
                ) from None
    made = [t.session_id for t in trajectories.of(Trajectory)]
    scores = [s.trajectory.session_id for s in scored.of(Scored)]
    everyone = {*ordinary, "oversized"}
    assert set(made) == set(scores) == everyone
    assert repeats(made) == repeats(scores) == 0
    [whole] = [t for t in trajectories.of(Trajectory) if t.session_id == "oversized"]
    expected = [big.prompts[c.call_id] + c.completion_token_ids for c in big.calls]
    assert [s.input_ids for s in whole.segments] == expected
    assert not letters.of(DeadLetter)
    assert reconstruct.starts == score.starts == 1, reconstruct.tail()
    chaos_report(
        fault="a session whose trajectory exceeds the record limit (issue 36, point 12)",
        load=f"1 session of 21 calls (18 MB of segments as deltas) amid {len(ordinary)} "
        "sessions, one partition",
        lost=len(everyone - set(made)) + len(everyone - set(scores)),
        duplicated=repeats(made) + repeats(scores),
        errors="0; its trajectory and its Scored record each carried in parts, "
        f"{reconstruct.starts - 1} restarts",
    )
