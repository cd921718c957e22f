"""The intake's commits: progress committed as sessions end, a failed commit never swallowed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import CommitFailedError
from aiokafka.structs import TopicPartition

from rollstream.producers.node.intake import TaskIntake, _Origin
from rollstream.producers.node.pool import NodeScheduler
from rollstream.producers.node.progress import PartitionProgress, decode
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings
from tests.producers.node.helpers import Sink, command_task, make_runner

TP = TopicPartition("rollstream.tasks", 0)


class RefusingOnce:
    """Stands in for the consumer's commit: the first refused (the group moved on), then kept."""

    def __init__(self) -> None:
        self.calls = 0
        self.kept: list[dict[TopicPartition, Any]] = []

    async def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        self.calls += 1
        if self.calls == 1:
            raise CommitFailedError("the group has already rebalanced")
        self.kept.append(offsets)


async def test_a_refused_commit_is_logged_counted_kept_behind_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner = make_runner(tmp_path, Sink())
    scheduler = NodeScheduler(runner)
    intake = TaskIntake(runner.settings, KafkaSettings(), scheduler, AvroSerializer())
    consumer = RefusingOnce()
    intake._consumer = consumer
    progress = intake._progress[TP] = PartitionProgress(7)
    entry = progress.take(7, 2)
    [first, second] = scheduler.submit(command_task("true", samples=2))
    for session in (first, second):
        intake._origins[session.session_id] = _Origin(TP, entry, session)
    intake.on_ended(second)  # sample 1 done: the commit stays at 7, sample 1 named past it

    assert not await intake.commit()
    assert intake.metrics.commits_failed == 1 and intake.partitions_behind == 1
    assert any("commit of" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)

    assert await intake.commit()  # tried again: now kept
    [(offset, metadata)] = consumer.kept[0].values()
    assert offset == 7 and decode(offset, metadata) == {7: frozenset({1})}
    assert intake.partitions_behind == 0
    intake.on_ended(first)
    assert await intake.commit()
    assert consumer.kept[-1] == {TP: (8, "")}


class Settling:
    """Stands in for the publisher's settled(): whether the lifecycle records would survive."""

    def __init__(self) -> None:
        self.safe = False
        self.asked: list[float] = []

    async def __call__(self, timeout: float) -> bool:
        self.asked.append(timeout)
        return self.safe


async def test_a_sample_is_committed_as_run_only_once_its_session_ended_is_safe(
    tmp_path: Path,
) -> None:
    """A crash between the commit and the SessionEnded leaving the process would otherwise
    lose a sample for good: committed as run, it never runs again, and never ends."""
    runner = make_runner(tmp_path, Sink())
    scheduler = NodeScheduler(runner)
    settled = Settling()
    intake = TaskIntake(
        runner.settings, KafkaSettings(), scheduler, AvroSerializer(), settled=settled
    )
    consumer = RefusingOnce()
    consumer.calls = 1  # keeps every commit
    intake._consumer = consumer
    progress = intake._progress[TP] = PartitionProgress(7)
    entry = progress.take(7, 1)
    [session] = scheduler.submit(command_task("true"))
    intake._origins[session.session_id] = _Origin(TP, entry, session)
    intake.on_ended(session)

    assert not await intake.commit()  # its SessionEnded is not acknowledged or spooled yet
    assert consumer.kept == [] and intake.metrics.commits_deferred == 1
    assert settled.asked and intake.partitions_behind == 1
    settled.safe = True
    assert await intake.commit()
    assert consumer.kept == [{TP: (8, "")}]


async def test_a_loop_that_raises_is_logged_counted_and_started_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the intake's loops were bare tasks: one exception and the node stopped taking
    tasks (or committing) for good while its API still answered."""
    monkeypatch.setattr("rollstream.producers.node.intake._COMMIT_RETRY_S", 0.0)
    runner = make_runner(tmp_path, Sink())
    intake = TaskIntake(runner.settings, KafkaSettings(), NodeScheduler(runner), AvroSerializer())
    runs = 0
    again = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("a bug in submit")
        again.set()
        await asyncio.Event().wait()  # runs on, as a loop does

    task = asyncio.create_task(intake._keep(flaky, "taking tasks"))
    await asyncio.wait_for(again.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runs == 2 and intake.metrics.loop_failures == 1
    assert any("taking tasks failed" in r.getMessage() for r in caplog.records)
