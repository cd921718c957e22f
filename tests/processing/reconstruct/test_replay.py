"""Replay from the retained events into a topic of its own, and the checker over a topic."""

from __future__ import annotations

import asyncio
import collections
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result

from rollstream.cli import cli
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.processing.reconstruct.check import check_topic
from rollstream.processing.reconstruct.replay import replay
from rollstream.schemas import TopicNames
from rollstream.schemas.trajectories import Trajectory, TrajectoryStatus
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.kafka_reading import read_records
from tests.processing.reconstruct.test_service import _send

pytestmark = pytest.mark.integration
SHAPE = SyntheticShape(turns=3, system_tokens=32, tool_result_tokens=8, completion_tokens=6)


async def test_replay_rebuilds_every_session_once_and_the_checker_passes_it(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    producer = await producer_factory()
    sessions = [synthetic_session(f"r{i}", SHAPE, group_id="g", seed=i) for i in range(5)]
    records = [r for batch in zip(*(s.records for s in sessions), strict=True) for r in batch]
    running = synthetic_session("running", SHAPE, seed=9).records[:-1]  # no SessionEnded yet
    await _send(producer, rollstream_topics.events, [*records, *running])
    await producer.send(rollstream_topics.events, b"junk", key=b"r0")
    lines: list[str] = []

    report = await replay(kafka_settings, "tree", "ablation1", progress=lines.append)
    assert report.topic == f"{rollstream_topics.trajectories}.ablation1"
    assert (report.trajectories, report.unfinished_sessions, report.undecodable) == (5, 1, 1)
    assert report.by_status == {"complete": 5}
    trajectories = await read_records(kafka_settings, report.topic, Trajectory, 5, settle_s=1.0)
    assert collections.Counter(t.session_id for t in trajectories) == {f"r{i}": 1 for i in range(5)}
    assert {t.strategy for t in trajectories} == {"tree"}
    assert all(t.status is TrajectoryStatus.COMPLETE for t in trajectories)

    checked = await check_topic(kafka_settings, report.topic, lines.append)
    assert (checked.trajectories, checked.violations, checked.missing_sessions) == (5, [], 0)

    # Filters: one session; a start time after everything.
    only = await replay(kafka_settings, "per_call", "one", sessions={"r3"}, progress=lines.append)
    assert only.trajectories == 1
    later = await replay(
        kafka_settings,
        "per_call",
        "none",
        since=datetime.now(UTC) + timedelta(hours=1),
        progress=lines.append,
    )
    assert later.trajectories == 0 and later.records == 0


async def test_replay_and_check_commands(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    producer = await producer_factory()
    await _send(producer, rollstream_topics.events, synthetic_session("c1", SHAPE).records)
    env = {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka_settings.topic_prefix,
    }
    runner = CliRunner()

    def run(*args: str) -> Result:  # the commands run their own event loop
        return runner.invoke(cli, list(args), env=env)

    result = await asyncio.to_thread(run, "replay", "--strategy", "prefix_merge", "--to", "x")
    assert result.exit_code == 0, result.output
    assert "1 trajectories into" in result.output and "1 complete" in result.output
    result = await asyncio.to_thread(run, "check", "trajectories.x")
    assert result.exit_code == 0, result.output
    assert "1 trajectories checked: 0 violations" in result.output
    bad = await asyncio.to_thread(run, "replay", "--strategy", "nope", "--to", "y")
    assert bad.exit_code == 1 and "nope" in bad.output


async def test_a_replayed_trajectory_over_the_record_budget_is_left_out_and_reported(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """per_call over 60 calls of 4k-token contexts: 18.6 MB, over the budget; the rest goes out."""
    producer = await producer_factory()
    big = synthetic_session(
        "big", SyntheticShape(turns=60, system_tokens=4000, tool_result_tokens=1000)
    )
    small = synthetic_session("small", SHAPE, seed=1)
    await _send(producer, rollstream_topics.events, [*big.records, *small.records])
    report = await replay(kafka_settings, "per_call", "big", progress=lambda _: None)
    assert (report.trajectories, report.oversized) == (1, ["big"])
    [trajectory] = await read_records(kafka_settings, report.topic, Trajectory, 1, settle_s=1.0)
    assert trajectory.session_id == "small"
