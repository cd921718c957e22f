"""The node's stage pools: limits held, init ahead of run, cancellation, records per session."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest

from rollstream.producers.node.pool import NodeScheduler, StageSpan
from rollstream.producers.node.session import Session, Stage
from rollstream.producers.node.settings import NodeSettings
from rollstream.schemas.sessions import SessionEnded, SessionStarted, SessionStatus
from tests.producers.node.helpers import (
    Sink,
    alive,
    command_task,
    make_runner,
    wait_dead,
    wait_for_files,
)
from tests.waiting import until


def _most_held(spans: list[StageSpan]) -> int:
    """The most sessions at once between their init's start and their run's end."""
    held: dict[str, list[float]] = {}
    for span in spans:
        if span.stage == "init":
            held.setdefault(span.session_id, [0.0, 0.0])[0] = span.start
        elif span.stage == "run":
            held.setdefault(span.session_id, [0.0, 0.0])[1] = span.end
    edges = sorted((t, d) for start, end in held.values() for t, d in ((start, 1), (end, -1)))
    most = current = 0
    for _, delta in edges:
        current += delta
        most = max(most, current)
    return most


def test_settings_come_from_rollstream_node_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLSTREAM_NODE_MAX_RUN", "12")
    monkeypatch.setenv("ROLLSTREAM_NODE_PREWARM", "0")
    settings = NodeSettings()
    assert (settings.max_run, settings.prewarm, settings.runtime) == (12, 0, "local")


async def test_sixteen_sessions_hold_the_limits_and_init_overlaps_run(tmp_path: Path) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink, max_init=2, max_run=4, max_post=2, prewarm=2)
    # The first runs wait at a gate the test opens once all four run slots are taken: whether the
    # pool fills must not depend on how fast inits are on a loaded machine (with a plain 1 s run,
    # the whole suite on 2 cores once saw only 3 of 4 at peak). Later runs pass the open gate.
    gate = tmp_path / "gate"
    command = f'while [ ! -e "{gate}" ]; do sleep 0.02; done; sleep 1.0; echo done > out.txt'
    task = command_task(command, samples=16, setup=["sleep 0.05"])
    async with NodeScheduler(runner) as scheduler:
        sessions = scheduler.submit(task)
        assert len({s.session_id for s in sessions}) == 16
        await until(lambda: scheduler.meter.current["run"] == 4, 60, "all four run slots taken")
        gate.touch()
        await scheduler.join(task.task_id)
        peak = scheduler.concurrency
        spans = list(scheduler.meter.spans)
    assert peak["init"] <= 2 and peak["run"] <= 4 and peak["post"] <= 2
    assert peak["run"] == 4  # and the run pool was used fully
    runs = [s for s in spans if s.stage == "run"]
    inits = [s for s in spans if s.stage == "init"]
    overlapping = [i for i in inits if any(r.start < i.start < r.end for r in runs)]
    assert len(overlapping) >= 8, "init must prepare later sessions while others run"
    assert _most_held(spans) <= 4 + 2  # from init start to run end: max_run + prewarm slots
    # Pre-warmed: after the first wave a run starts as soon as another ends, not an init later.
    gaps = []
    for run in sorted(runs, key=lambda r: r.start)[4:]:
        gaps.append(run.start - max(r.end for r in runs if r.end <= run.start + 0.001))
    init_s = statistics.median(i.end - i.start for i in inits)
    assert statistics.median(gaps) < init_s / 2, (gaps, init_s)
    ended = sink.ended()
    assert len(ended) == 16 and all(e.status is SessionStatus.COMPLETED for e in ended)
    assert all(b"+done" in e.artifacts[0].content for e in ended)
    assert sorted(e.sample_index for e in ended) == list(range(16))
    assert not list((tmp_path / "sessions").iterdir())


async def test_each_session_emits_started_then_ended_with_its_call_count(
    tmp_path: Path,
) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink, max_init=2, max_run=3)
    async with NodeScheduler(runner) as scheduler:
        sessions = scheduler.submit(command_task("true", samples=5))
        for i, session in enumerate(sessions):
            sink.counts[session.session_id] = i * 10
        await scheduler.join()
    assert len(sink.records) == 10
    for i, session in enumerate(sessions):
        started, ended = sink.of(session.session_id)
        assert isinstance(started, SessionStarted) and isinstance(ended, SessionEnded)
        assert ended.call_count == i * 10 and ended.group_id == "g1"
        assert session.stage is Stage.ENDED and session.ended == ended


async def test_without_prewarm_init_waits_for_a_free_run_slot(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, Sink(), max_init=4, max_run=2, prewarm=0)
    async with NodeScheduler(runner) as scheduler:
        scheduler.submit(command_task("sleep 0.2", samples=6))
        await scheduler.join()
        # Never more sessions prepared, ready or running than run slots.
        assert _most_held(list(scheduler.meter.spans)) <= 2


async def test_cancelling_a_task_stops_its_queued_and_running_sessions(tmp_path: Path) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink, max_init=2, max_run=2, prewarm=1)
    pids = tmp_path / "pids"
    pids.mkdir()
    doomed = command_task(
        f'sleep 300 & echo $! > {pids}/"$ROLLSTREAM_SESSION"; wait', samples=6, task_id="doomed"
    )
    other = command_task("sleep 0.1", samples=2, task_id="other", priority=-1)
    async with NodeScheduler(runner) as scheduler:
        sessions = scheduler.submit(doomed)
        kept = scheduler.submit(other)
        running = [pids / s.session_id for s in sessions[:2]]
        await wait_for_files(running)  # the first two run; the rest are ready or queued
        child_pids = [int(p.read_text()) for p in running]
        assert scheduler.cancel("doomed") == 6
        await asyncio.wait_for(scheduler.join("doomed"), 15)
        assert all(s.ended is not None for s in sessions)
        ended = [s.ended for s in sessions if s.ended is not None]
        assert [e.status for e in ended] == [SessionStatus.CANCELLED] * 6
        assert all(e.error == "task cancelled" for e in ended)
        for pid in child_pids:
            assert await wait_dead(pid), f"{pid} survived the cancel"
        assert all(s.stage is Stage.ENDED for s in sessions)
        await scheduler.join("other")  # the other task was not touched
        assert all(s.ended and s.ended.status is SessionStatus.COMPLETED for s in kept)
        assert all(n == 0 for n in scheduler.meter.current.values())
    assert len(list(pids.iterdir())) == 2  # the queued ones never started a harness
    assert not any(alive(pid) for pid in child_pids)
    for session in sessions:
        assert [type(r) for r in sink.of(session.session_id)] == [SessionStarted, SessionEnded]
    assert not list((tmp_path / "sessions").iterdir())


async def test_close_cancels_what_is_still_running(tmp_path: Path) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink, max_run=2)
    scheduler = NodeScheduler(runner)
    await scheduler.start()
    sessions = scheduler.submit(command_task("sleep 300", samples=3))
    while not any(s.stage is Stage.RUN for s in sessions):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    await asyncio.wait_for(scheduler.close(), 15)
    assert [s.ended.status for s in sessions if s.ended] == [SessionStatus.CANCELLED] * 3


async def test_higher_priority_tasks_start_first(tmp_path: Path) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink, max_init=1, max_run=1, prewarm=0)
    scheduler = NodeScheduler(runner)
    # Queued before the workers start, so the order is the queue's alone.
    scheduler.submit(command_task("true", task_id="low", priority=0))
    scheduler.submit(command_task("true", task_id="high", priority=5))
    async with scheduler:
        await scheduler.join()
    assert [r.task_id for r in sink.started()] == ["high", "low"]


async def test_withdrawn_sessions_emit_nothing_and_handed_back_ones_end_cancelled(
    tmp_path: Path,
) -> None:
    sink = Sink()
    runner = make_runner(tmp_path, sink, max_init=1, max_run=1, prewarm=1)
    pids = tmp_path / "pids"
    pids.mkdir()
    task = command_task(f'sleep 300 & echo $! > {pids}/"$ROLLSTREAM_SESSION"; wait', samples=4)
    over: list[Session] = []
    async with NodeScheduler(runner, on_ended=over.append) as scheduler:
        sessions = scheduler.submit(task)
        await wait_for_files([pids / sessions[0].session_id])
        while sessions[1].stage is not Stage.READY:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        # One runs, one is initialized and waits for the run slot, two are queued.
        withdrawn = scheduler.withdraw(sessions)
        assert withdrawn == sessions[1:]
        assert scheduler.hand_back(sessions, "moved") == sessions[:1]
        await asyncio.wait_for(scheduler.wait(sessions), 15)
        assert scheduler.held == 0 and all(n == 0 for n in scheduler.meter.current.values())
        [summary] = scheduler.summaries(task.task_id)  # withdrawn ones leave no trace
    assert [type(r) for r in sink.records] == [SessionStarted, SessionEnded]
    [ended] = sink.ended()
    assert ended.session_id == sessions[0].session_id == summary.session_id
    assert ended.status is SessionStatus.CANCELLED and ended.error == "moved"
    assert sessions[0].handed_back and all(s.withdrawn for s in sessions[1:])
    assert sorted(s.sample for s in over) == [0, 1, 2, 3]  # each told once, after teardown
    assert len(list(pids.iterdir())) == 1  # no withdrawn session started a harness
    assert not list((tmp_path / "sessions").iterdir())


async def test_ended_sessions_are_forgotten_and_only_a_bounded_summary_is_kept(
    tmp_path: Path,
) -> None:
    runner = make_runner(tmp_path, Sink(), finished_sessions_kept=5)
    async with NodeScheduler(runner) as scheduler:
        for i in range(4):
            scheduler.submit(command_task("true", samples=2, task_id=f"t{i}"))
        await scheduler.join()
        assert all(scheduler.sessions(f"t{i}") == [] for i in range(4))
        assert scheduler.held == 0
        assert len(scheduler.finished) <= 5
        assert scheduler.summaries("t0") == []  # the oldest task is forgotten
        latest = scheduler.summaries("t3")
        assert [(s.stage, s.status) for s in latest] == [("ended", "completed")] * 2
