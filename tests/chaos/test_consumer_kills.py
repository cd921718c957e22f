"""The scorer, the rollout node and the reconstructor SIGKILLed and restarted mid-run.

The three run as ``python -m rollstream`` processes against the session broker; the scripted
backend and the interceptor run in process. Ten tasks of two samples go to the node (the
``python`` harness running ``rollstream.dev.demo.agent:run``, a command evaluator); each of the
three processes is killed once while work is in flight, one after the other, and started again
at once. Afterwards, in the read_committed topics: exactly one trajectory and one Scored record
for every session that left a record in the events topic.

What the node's SIGKILL does, as ``producers/node/intake.py`` documents it: a task's offset is
committed only once all its sessions (and those of every earlier task of its partition) have
ended, and the samples finished past it ride in the commit's metadata, so the restarted node
runs again, with new session ids, the samples of uncommitted tasks not committed as done (at
least once: one that ended just before the kill, its commit not yet made, runs again); the
sessions the killed node was running never get a SessionEnded, and the reconstructor closes
them as ``abandoned`` after its idle timeout. Observed (reported, not asserted): their harness
processes are not in the node's process group (``harnesses/runner.py`` starts each in a session
of its own), so they outlive the node and finish their calls, which the interceptor records.
"""

from __future__ import annotations

import asyncio
import collections
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rollstream.host import free_port
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.kafka.clients import make_admin
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import CallRecord, CallStatus, SessionEnded, SessionStarted, TopicNames
from rollstream.schemas.sessions import SessionStatus
from rollstream.schemas.trajectories import Scored, Trajectory, TrajectoryStatus
from rollstream.settings import KafkaSettings, StatePaths
from tests.chaos.pipeline import (
    MODEL,
    Service,
    TopicReader,
    counting_backend,
    repeats,
    service_env,
    topic_readers,
)
from tests.conftest import JAR_CACHE
from tests.fault_table import ChaosReport
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

TASKS = 10
SAMPLES = 2
IDLE_TIMEOUT_S = (
    10  # sessions the node's kill cut short are closed this long after their last record
)


def _task(index: int) -> dict[str, Any]:
    return {
        "task_id": f"chaos-t{index}",
        "group_id": f"chaos-g{index}",
        "instruction": "Create hello.txt containing polar.",
        "samples": SAMPLES,
        "harness": "python",
        "workspace": {"kind": "inline", "files": {"README.md": "a chaos task\n"}},
        "evaluator": {"kind": "command", "config": {"command": "test -f hello.txt"}},
        "agent_timeout_s": 60,
        "metadata": {"harness.function": "rollstream.dev.demo.agent:run"},
    }


class Run:
    """The processes, the readers and the node's API for one run."""

    def __init__(
        self,
        services: dict[str, Service],
        readers: list[TopicReader],
        node_url: str,
        kafka: KafkaSettings,
        node_group: str,
    ) -> None:
        self.services = services
        self.events, self.trajectories, self.scored = readers
        self.node_url = node_url
        self.kafka = kafka
        self.node_group = node_group

    async def poll(self) -> None:
        for reader in (self.events, self.trajectories, self.scored):
            await reader.poll(100)
        for name, service in self.services.items():
            assert service.alive(), f"{name} died:\n{service.tail()}"

    def sessions(self) -> set[str]:
        """Every session that left a record in the events topic."""
        ids: set[str] = set()
        for record in self.events.records:
            if isinstance(record, CallRecord | SessionStarted | SessionEnded):
                ids.add(record.session_id)
        return ids

    async def node_stages(self) -> collections.Counter[str]:
        """Sessions per stage on the node now (those it knows of)."""
        stages: collections.Counter[str] = collections.Counter()
        async with aiohttp.ClientSession(base_url=self.node_url) as http:
            for i in range(TASKS):
                async with http.get(f"/tasks/chaos-t{i}") as reply:
                    if reply.status == 200:
                        stages.update(s["stage"] for s in (await reply.json())["sessions"])
        return stages

    async def tasks_committed(self) -> int:
        """How many task records the node's group has committed past."""
        admin = make_admin(self.kafka)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(self.node_group)
        finally:
            await admin.close()
        return sum(meta.offset for meta in offsets.values() if meta.offset > 0)

    def restart(self, name: str) -> None:
        service = self.services[name]
        service.kill()
        service.start()


async def test_reconstructor_scorer_and_node_sigkilled_one_trajectory_and_score_per_session(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    state = tmp_path / "state"
    prefix = kafka_settings.topic_prefix
    node_port = free_port()
    node_group = f"{prefix}-node"
    async with (
        counting_backend(state, ttft_ms=150, tpot_ms=8) as backend,
        Interceptor(
            InterceptorSettings(upstream=backend.url, port=0, admin_port=0, upstream_model=MODEL),
            kafka_settings,
            PublisherSettings(),
            StatePaths(state_dir=state, cache_dir=JAR_CACHE),
        ) as interceptor,
    ):
        env = {
            "reconstruct": service_env(
                kafka_settings,
                state,
                ROLLSTREAM_RECONSTRUCT_GROUP=f"{prefix}-reconstruct",
                ROLLSTREAM_RECONSTRUCT_WAIT_FOR_CALLS_S="5",
                ROLLSTREAM_RECONSTRUCT_IDLE_TIMEOUT_S=str(IDLE_TIMEOUT_S),
            ),
            "score": service_env(
                kafka_settings,
                state,
                ROLLSTREAM_SCORE_GROUP_ID=f"{prefix}-score",
                ROLLSTREAM_SCORE_WORK_ROOT=str(tmp_path / "score"),
                ROLLSTREAM_SCORE_EVALUATOR_TIMEOUT_S="60",
            ),
            "node": service_env(
                kafka_settings,
                state,
                ROLLSTREAM_NODE_PORT=str(node_port),
                ROLLSTREAM_NODE_GROUP=node_group,
                ROLLSTREAM_NODE_NODE_ID="chaos-node",
                ROLLSTREAM_NODE_BASE_URL=interceptor.url,
                ROLLSTREAM_NODE_INTERCEPTOR_ADMIN=interceptor.admin_url,
                ROLLSTREAM_NODE_MODEL=MODEL,
                ROLLSTREAM_NODE_MAX_RUN="4",
                ROLLSTREAM_NODE_WORK_ROOT=str(tmp_path / "sessions"),
            ),
        }
        services = {
            name: Service(name, [name], env[name], tmp_path / f"{name}.log") for name in env
        }
        for service in services.values():
            service.start()
        try:
            async with topic_readers(
                kafka_settings,
                rollstream_topics.events,
                rollstream_topics.trajectories,
                rollstream_topics.scored,
            ) as readers:
                run = Run(
                    services, readers, f"http://127.0.0.1:{node_port}", kafka_settings, node_group
                )
                await _exercise(run, chaos_report)
                assert backend.served.failed == 0
        finally:
            for service in services.values():
                service.stop()


async def _exercise(run: Run, chaos_report: ChaosReport) -> None:
    async def node_up() -> bool:
        try:
            async with (
                aiohttp.ClientSession(base_url=run.node_url) as http,
                http.get("/health") as reply,
            ):
                return reply.status == 200
        except aiohttp.ClientError:
            await run.poll()
            return False

    await until(node_up, 60, "the node's API answers", interval=0.2)
    async with aiohttp.ClientSession(base_url=run.node_url) as http:
        for i in range(TASKS):
            async with http.post("/tasks", json=_task(i)) as response:
                assert response.status == 202, await response.text()

    # 1. The scorer, once it has scored something and has a trajectory still to score.
    async def scoring() -> bool:
        await run.poll()
        return 2 <= len(run.scored.records) < len(run.trajectories.records)

    await until(scoring, 90, "the first scores", interval=0.2)
    run.restart("score")

    # 2. The node, with sessions running and some tasks done already.
    async def node_busy() -> bool:
        await run.poll()
        stages = await run.node_stages()
        return stages["run"] >= 2 and stages["ended"] >= 4

    await until(node_busy, 60, "sessions running on the node", interval=0.2)
    killed_at = datetime.now(UTC)
    run.restart("node")

    # 3. The reconstructor, holding open sessions (those the node's kill cut short among them).
    await asyncio.sleep(3)
    await run.poll()
    assert run.sessions() - {t.session_id for t in run.trajectories.of(Trajectory)}
    run.restart("reconstruct")

    async def drained() -> bool:
        await run.poll()
        sessions = run.sessions()
        return (
            await run.tasks_committed() == TASKS
            and {t.session_id for t in run.trajectories.of(Trajectory)} == sessions
            and {s.trajectory.session_id for s in run.scored.of(Scored)} == sessions
        )

    await until(
        drained, 150, "every task re-run and every session reconstructed and scored", interval=0.2
    )
    for reader in (run.events, run.trajectories, run.scored):
        await reader.settle(2.0)
    _check(run, killed_at, chaos_report)


def _check(run: Run, killed_at: datetime, chaos_report: ChaosReport) -> None:
    started = {s.session_id: s for s in run.events.of(SessionStarted)}
    ended = {e.session_id: e for e in run.events.of(SessionEnded)}
    calls: dict[str, set[str]] = collections.defaultdict(set)
    late_calls = 0
    for call in run.events.of(CallRecord):
        calls[call.session_id].add(call.call_id)
    trajectories = run.trajectories.of(Trajectory)
    scored = run.scored.of(Scored)
    sessions = run.sessions()
    by_session = {t.session_id: t for t in trajectories}

    # The node: sessions of its first life that never ended, and what the restart re-ran.
    first = {s for s, r in started.items() if r.started_at < killed_at}
    second = {s for s, r in started.items() if r.started_at >= killed_at}
    cut_short = first - set(ended)
    per_task: dict[str, dict[str, list[SessionStarted]]] = collections.defaultdict(
        lambda: {"first": [], "second": []}
    )
    for session, record in started.items():
        per_task[record.task_id]["first" if session in first else "second"].append(record)
    for session in cut_short:
        # A harness dies with its node: a call already on its way may still arrive just after.
        late_calls += sum(
            1
            for c in run.events.of(CallRecord)
            if c.session_id == session and c.timings.started_at > killed_at + timedelta(seconds=1)
        )
    rerun = {task for task, lives in per_task.items() if lives["second"]}
    again = {task for task in rerun if per_task[task]["first"]}
    # Samples that completed in both lives: ended after the last commit, before the kill.
    twice = sum(
        1
        for lives in per_task.values()
        for sample in range(SAMPLES)
        if all(_completed(life, sample, ended) for life in lives.values())
    )
    failed = [e for e in ended.values() if e.status is not SessionStatus.COMPLETED]
    failed_calls = [c for c in run.events.of(CallRecord) if c.error is not None]
    # The calls its harness had in flight when the node died: cancelled, and recorded as such.
    cut_calls = [c for c in failed_calls if c.session_id in cut_short]
    failed_calls = [c for c in failed_calls if c.session_id not in cut_short]
    load = f"{TASKS} tasks x {SAMPLES} samples ({len(sessions)} sessions)"
    harness_errors = len(failed) + len(failed_calls)
    lost_trajectories = len(sessions - set(by_session))
    lost_scores = len(sessions - {s.trajectory.session_id for s in scored})
    # A sample run twice in one life of the node, or a session with two trajectories.
    node_duplicated = repeats(
        [f"{r.task_id}/{r.sample_index}/{s in first}" for s, r in started.items()]
    ) + repeats([t.session_id for t in trajectories])
    chaos_report(
        fault="reconstructor SIGKILL + restart",
        load=load,
        lost=lost_trajectories,
        duplicated=repeats([t.session_id for t in trajectories]),
        errors=str(harness_errors),
    )
    chaos_report(
        fault="scorer SIGKILL + restart",
        load=load,
        lost=lost_scores,
        duplicated=repeats([s.trajectory.session_id for s in scored]),
        errors=str(harness_errors),
    )
    chaos_report(
        fault="node SIGKILL + restart",
        load=f"{load}; the restarted node ran the {len(rerun)} uncommitted tasks "
        f"({len(again)} of them started before the kill; {twice} samples completed in both "
        "lives)",
        lost=sum(1 for task in per_task.values() if not _complete_run(task, ended)),
        duplicated=node_duplicated,
        errors=f"{harness_errors}; {len(cut_short)} sessions cut short: abandoned trajectories, "
        f"their harnesses died with the node ({len(cut_calls)} calls cancelled, "
        f"{late_calls} after the kill)",
    )

    # Exactly one trajectory and one score per session, whatever was killed.
    assert lost_trajectories == 0 and lost_scores == 0
    assert repeats([t.session_id for t in trajectories]) == 0
    assert repeats([s.trajectory.session_id for s in scored]) == 0
    assert not failed and not failed_calls, (failed, failed_calls)
    assert all(c.status is CallStatus.CANCELLED for c in cut_calls), cut_calls
    assert late_calls == 0  # no harness outlived its node
    # Every task ran to the end: each of its samples completed in one life or the other.
    assert set(per_task) == {f"chaos-t{i}" for i in range(TASKS)}
    assert all(_complete_run(task, ended) for task in per_task.values()), per_task
    # The kill cut sessions short, and each of their tasks ran again, under new session ids.
    assert cut_short, "the node was killed with no session running"
    assert first.isdisjoint(second) and node_duplicated == 0
    assert {started[s].task_id for s in cut_short} <= rerun
    for session in cut_short:  # each sample the kill cut short completed after the restart
        record = started[session]
        assert _completed(per_task[record.task_id]["second"], record.sample_index, ended)
    for task in rerun:
        samples = sorted(r.sample_index for r in per_task[task]["second"])
        assert len(set(samples)) == len(samples), (task, samples)  # each sample once at most
        assert all(r.session_id in ended for r in per_task[task]["second"])
    for session in sessions:
        trajectory = by_session[session]
        if session in cut_short:
            assert trajectory.status is TrajectoryStatus.ABANDONED, session
        else:
            assert trajectory.status is TrajectoryStatus.COMPLETE, session
            assert trajectory.stats.calls == len(calls[session]) == ended[session].call_count


def _completed(life: list[SessionStarted], sample: int, ended: dict[str, SessionEnded]) -> bool:
    """Whether ``sample`` completed in this life of the node."""
    return any(
        r.sample_index == sample
        and r.session_id in ended
        and ended[r.session_id].status is SessionStatus.COMPLETED
        for r in life
    )


def _complete_run(lives: dict[str, list[SessionStarted]], ended: dict[str, SessionEnded]) -> bool:
    """Whether every sample of the task completed, in one of the node's lives or the other."""
    return all(
        any(_completed(life, sample, ended) for life in lives.values()) for sample in range(SAMPLES)
    )
