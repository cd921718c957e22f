"""Nodes joining and leaving one group on the real broker: every sample completes once.

Two nodes run in this process against the session broker (the tasks topic has 3 partitions);
the ``command`` harness stands in for an agent and no interceptor is needed (a session's call
count is then 0, with the reason in its SessionEnded). What is counted is what a reader of the
events topic sees: per task and sample, the SessionEnded records that are not ``cancelled``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from rollstream.host import free_port
from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import AvroRecord, AvroSerializer, SessionEnded, SessionStarted, TopicNames
from rollstream.schemas.sessions import SessionStatus, handed_back
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import ProducerFactory
from tests.kafka_reading import read_records
from tests.producers.node.helpers import command_task
from tests.waiting import until

pytestmark = pytest.mark.integration


class Nodes:
    """Nodes of one group, made on demand, stopped at the end."""

    def __init__(self, kafka: KafkaSettings, tmp_path: Path) -> None:
        self.kafka = kafka
        self.tmp_path = tmp_path
        self.admin = f"http://127.0.0.1:{free_port()}"  # nobody there: call counts are 0
        self.running: list[Node] = []

    async def start(self, node_id: str, **settings: Any) -> Node:
        values: dict[str, Any] = {
            "port": 0,
            "node_id": node_id,
            "group": f"{self.kafka.topic_prefix}-nodes",
            "work_root": self.tmp_path / node_id,
            "interceptor_admin": self.admin,
        }
        paths = StatePaths(state_dir=self.tmp_path / f"state-{node_id}")
        node = Node(NodeSettings(**(values | settings)), self.kafka, PublisherSettings(), paths)
        await node.start()
        self.running.append(node)
        return node

    async def stop(self, node: Node) -> None:
        self.running.remove(node)
        await node.stop()


@asynccontextmanager
async def nodes(kafka: KafkaSettings, tmp_path: Path) -> AsyncIterator[Nodes]:
    group = Nodes(kafka, tmp_path)
    try:
        yield group
    finally:
        for node in list(group.running):
            await group.stop(node)


async def _submit(producer_factory: ProducerFactory, names: TopicNames, *tasks: Any) -> None:
    """Produce ``tasks`` round-robin over the three partitions of the tasks topic."""
    producer = await producer_factory()
    serializer = AvroSerializer()
    for i, task in enumerate(tasks):
        value, key = serializer.encode(task), task.task_id.encode()
        await producer.send_and_wait(names.tasks, value, key=key, partition=i % 3)


async def _lifecycle(kafka: KafkaSettings, names: TopicNames, ended: int) -> list[AvroRecord]:
    """The events topic's lifecycle records once ``ended`` samples have completed."""

    seen: set[tuple[str, int]] = set()

    def completing(record: AvroRecord) -> bool:
        """The first SessionEnded not cancelled of each sample (a duplicate is not waited for)."""
        if not isinstance(record, SessionEnded) or record.status is SessionStatus.CANCELLED:
            return False
        key = (record.task_id, record.sample_index)
        if key in seen:
            return False
        seen.add(key)
        return True

    await read_records(kafka, names.events, AvroRecord, ended, where=completing, timeout=120)
    return await read_records(
        kafka,
        names.events,
        AvroRecord,
        0,
        where=lambda r: isinstance(r, SessionStarted | SessionEnded),
        settle_s=2.0,
    )


def _completions(records: list[AvroRecord]) -> collections.Counter[tuple[str, int]]:
    return collections.Counter(
        (r.task_id, r.sample_index)
        for r in records
        if isinstance(r, SessionEnded) and r.status is not SessionStatus.CANCELLED
    )


def _ran_on(records: list[AvroRecord]) -> dict[str, str]:
    """Session id -> the node that started it."""
    return {r.session_id: r.node_id for r in records if isinstance(r, SessionStarted)}


async def test_a_node_joining_mid_run_and_one_leaving_complete_every_sample_once(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    # First a task on each partition, all six samples running on the first node at the join.
    early = [command_task("sleep 3", task_id=f"early-{i}", samples=2) for i in range(3)]
    late = [command_task("sleep 1.5", task_id=f"late-{i}", samples=2) for i in range(9)]
    await _submit(producer_factory, rollstream_topics, *early)
    async with nodes(kafka_settings, tmp_path) as group:
        first = await group.start("a", max_init=6, max_run=6, prewarm=0)
        await until(lambda: first.scheduler.meter.current["run"] == 6, 60, "six running")
        second = await group.start("b", max_init=2, max_run=2, prewarm=0, max_queued=2)
        await _lifecycle(kafka_settings, rollstream_topics, 6)
        # Then more work for both, and the first node leaves while it runs some of it.
        await _submit(producer_factory, rollstream_topics, *late)
        await until(
            lambda: (
                first.scheduler.meter.current["run"] > 0
                and second.scheduler.meter.current["run"] > 0
            ),
            60,
            "both nodes running sessions",
        )
        await group.stop(first)  # a clean leave
        records = await _lifecycle(kafka_settings, rollstream_topics, 24)
        first_metrics, second_metrics = first.intake.metrics, second.intake.metrics
    completions = _completions(records)
    expected = {(t.task_id, s) for t in early + late for s in range(2)}
    assert set(completions) == expected  # none lost
    assert all(n == 1 for n in completions.values()), completions  # none twice
    assert set(_ran_on(records).values()) == {"a", "b"}
    assert first_metrics.commits_failed == second_metrics.commits_failed == 0
    # Sessions of 1.5 and 3 s end well within the hand-off bound: none was cut short.
    assert first_metrics.sessions_handed_back == second_metrics.sessions_handed_back == 0


async def test_a_session_cut_at_the_hand_off_bound_runs_again_elsewhere_and_only_it(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    flag = tmp_path / "hold"
    flag.touch()
    # Sample 0 ends at once; the others wait while the flag is there.
    command = (
        f'case "$ROLLSTREAM_SESSION" in *-0-*) ;; *) while [ -e {flag} ]; do sleep 0.1; done;; esac'
    )
    task = command_task(command, task_id="cut", samples=3)
    await _submit(producer_factory, rollstream_topics, task)
    async with nodes(kafka_settings, tmp_path) as group:
        first = await group.start("a", max_run=3, handoff_timeout_s=1.0)
        await until(
            lambda: (
                len(first.scheduler.finished) == 1 and first.scheduler.meter.current["run"] == 2
            ),
            60,
            "sample 0 done and the two others running",
        )
        await group.stop(first)
        assert first.intake.metrics.sessions_handed_back == 2
        flag.unlink()
        second = await group.start("b", max_run=3)
        records = await _lifecycle(kafka_settings, rollstream_topics, 3)
        assert second.intake.metrics.samples_skipped == 1
    assert _completions(records) == {("cut", 0): 1, ("cut", 1): 1, ("cut", 2): 1}
    ran_on = _ran_on(records)
    by_sample = {
        r.sample_index: ran_on[r.session_id]
        for r in records
        if isinstance(r, SessionEnded) and r.status is SessionStatus.COMPLETED
    }
    assert by_sample == {0: "a", 1: "b", 2: "b"}
    cut = [
        r for r in records if isinstance(r, SessionEnded) and r.status is SessionStatus.CANCELLED
    ]
    assert len(cut) == 2 and all(handed_back(r) for r in cut)  # what the reconstructor reads
    assert not any(handed_back(r) for r in records if isinstance(r, SessionEnded) and r not in cut)


async def test_a_full_node_leaves_the_backlog_on_the_topic(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    flag = tmp_path / "hold"
    flag.touch()
    command = f"while [ -e {flag} ]; do sleep 0.1; done"
    tasks = [command_task(command, task_id=f"backlog-{i}") for i in range(6)]
    await _submit(producer_factory, rollstream_topics, *tasks)
    async with nodes(kafka_settings, tmp_path) as group:
        node = await group.start("a", max_run=1, prewarm=0, max_queued=1)
        await until(lambda: node.scheduler.meter.current["run"] == 1, 60, "a session running")
        await asyncio.sleep(2)  # room for the intake to take more, were it to
        # One running, one queued (the bound): the four others are still on the topic.
        assert node.tasks_seen == 2 and node.scheduler.queued == 1
        assert node.intake.metrics.paused
        flag.unlink()
        records = await _lifecycle(kafka_settings, rollstream_topics, 6)
        assert node.scheduler.held == 0
    assert _completions(records) == {(t.task_id, 0): 1 for t in tasks}
