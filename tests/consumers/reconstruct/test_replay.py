"""Replay from the retained events into a topic of its own, and the checker over a topic."""

from __future__ import annotations

import asyncio
import collections
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner, Result

from rollstream.cli import cli
from rollstream.consumers.reconstruct.check import check_topic
from rollstream.consumers.reconstruct.replay import replay
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import TopicNames
from rollstream.schemas.trajectories import Trajectory, TrajectoryStatus
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.reconstruct.test_service import _send
from tests.kafka_reading import parts_written, read_records

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


async def test_a_replayed_trajectory_over_the_record_budget_goes_out_in_parts(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """per_call over 21 calls adding 100k tokens each: 18 MB as deltas, over the budget; it goes
    out in parts and reads whole, beside the rest (before, it was left out of the replay)."""
    producer = await producer_factory()
    big = synthetic_session(
        "big", SyntheticShape(turns=21, system_tokens=64, tool_result_tokens=100_000)
    )
    small = synthetic_session("small", SHAPE, seed=1)
    await _send(producer, rollstream_topics.events, [*big.records, *small.records])
    report = await replay(kafka_settings, "per_call", "big", progress=lambda _: None)
    assert (report.trajectories, report.in_parts) == (2, 1)
    trajectories = await read_records(kafka_settings, report.topic, Trajectory, 2, settle_s=1.0)
    assert sorted(t.session_id for t in trajectories) == ["big", "small"]
    [whole] = [t for t in trajectories if t.session_id == "big"]
    expected = [big.prompts[c.call_id] + c.completion_token_ids for c in big.calls]
    assert [s.input_ids for s in whole.segments] == expected
    assert await parts_written(kafka_settings, report.topic) == 2
