"""The whole pipeline on the three-node cluster, for the cluster faults and the scale tests.

The scripted backend runs in this process; every rollout node (with its own interceptor), the
reconstructors and the scorers run as ``python -m rollstream`` processes. Every topic has three
replicas and ``min.insync.replicas`` 2. ``run_tasks`` submits the tasks, calls the fault when
enough sessions ended, and waits until every session is reconstructed and scored.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from rollstream.dev.broker import LocalCluster
from rollstream.host import free_port
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_admin, make_producer
from rollstream.producers.node.api import task_from_document
from rollstream.schemas import (
    AvroSerializer,
    CallRecord,
    SessionEnded,
    SessionStarted,
    TopicNames,
    topic_specs,
)
from rollstream.schemas.sessions import SessionStatus
from rollstream.schemas.trajectories import Scored, Trajectory, TrajectoryStatus
from rollstream.settings import KafkaSettings
from tests.chaos.interceptor_proc import InterceptorProcess
from tests.chaos.pipeline import (
    MODEL,
    CountingBackend,
    Service,
    TopicReader,
    counting_backend,
    repeats,
    service_env,
    topic_readers,
)
from tests.waiting import until

PARTITIONS = 6


def cluster_task(index: int, samples: int) -> dict[str, Any]:
    """A task of ``samples`` sessions: the python harness, five calls, a command evaluator."""
    return {
        "task_id": f"cluster-t{index}",
        "group_id": f"cluster-g{index}",
        "instruction": "Create hello.txt containing polar.",
        "samples": samples,
        "harness": "python",
        "workspace": {"kind": "inline", "files": {"README.md": "a cluster task\n"}},
        "evaluator": {"kind": "command", "config": {"command": "test -f hello.txt"}},
        "agent_timeout_s": 120,
        "metadata": {"harness.function": "rollstream.dev.demo.agent:run"},
    }


@dataclass
class Outcome:
    """What one run left in the topics, counted."""

    sessions: set[str]
    calls_served: int
    calls_recorded: int
    calls_ok: int
    lost_calls: int
    lost_trajectories: int
    lost_scores: int
    duplicated_trajectories: int
    duplicated_scores: int
    failed_sessions: list[str] = field(default_factory=list)
    failed_calls: int = 0
    cancelled_sessions: list[str] = field(default_factory=list)
    not_complete: list[str] = field(default_factory=list)
    samples_twice: int = 0
    by_node: dict[str, int] = field(default_factory=dict)


@dataclass
class ClusterRun:
    """A running pipeline on the cluster; ``poll`` reads on and checks every process lives.

    Services are named ``node-1``, ``reconstruct-1``, ``score-1``...; each node has its own
    interceptor (in this process). ``add`` starts one more of a kind mid-run; ``leave`` stops
    one cleanly (SIGTERM) and ``kill`` SIGKILLs one: neither is expected alive afterwards.
    """

    cluster: LocalCluster
    kafka: KafkaSettings
    topics: TopicNames
    backend: CountingBackend
    readers: list[TopicReader]
    tmp_path: Path
    services: dict[str, Service] = field(default_factory=dict)
    interceptors: list[InterceptorProcess] = field(default_factory=list)
    max_run: int = 8
    gone: set[str] = field(default_factory=set)
    node_urls: dict[str, str] = field(default_factory=dict)

    async def poll(self) -> None:
        """Read what arrived; fail if a service died that should live."""
        for reader in self.readers:
            await reader.poll(100)
        for name, service in self.services.items():
            assert name in self.gone or service.alive(), f"{name} died:\n{service.tail()}"

    @property
    def events(self) -> TopicReader:
        """The events topic's reader."""
        return self.readers[0]

    def ended(self) -> int:
        """Sessions ended so far."""
        return len(self.events.of(SessionEnded))

    def started_on(self, node: str) -> int:
        """Sessions started so far on ``node``."""
        return len([s for s in self.events.of(SessionStarted) if s.node_id == node])

    async def add(self, kind: str) -> str:
        """Start one more ``node``, ``reconstruct`` or ``score`` process; its name."""
        index = 1 + sum(1 for name in self.services if name.startswith(f"{kind}-"))
        name = f"{kind}-{index}"
        state = self.tmp_path / "state"
        prefix = self.kafka.topic_prefix
        if kind == "node":
            # A process of its own: mitmproxy keeps global state, one proxy per process.
            interceptor = InterceptorProcess(
                self.backend.url,
                self.kafka,
                state / name,
                self.tmp_path / f"interceptor-{name}.log",
                options=["--upstream-model", MODEL],
            )
            self.interceptors.append(interceptor)
            await interceptor.start()
            port = free_port()
            env = service_env(
                self.kafka,
                state / name,
                ROLLSTREAM_NODE_PORT=str(port),
                ROLLSTREAM_NODE_GROUP=f"{prefix}-node",
                ROLLSTREAM_NODE_NODE_ID=name,
                ROLLSTREAM_NODE_BASE_URL=interceptor.url,
                ROLLSTREAM_NODE_INTERCEPTOR_ADMIN=interceptor.admin_url,
                ROLLSTREAM_NODE_MODEL=MODEL,
                ROLLSTREAM_NODE_MAX_RUN=str(self.max_run),
                ROLLSTREAM_NODE_WORK_ROOT=str(self.tmp_path / name),
            )
            self.node_urls[name] = f"http://127.0.0.1:{port}"
        elif kind == "reconstruct":
            env = service_env(
                self.kafka,
                state,
                ROLLSTREAM_RECONSTRUCT_GROUP=f"{prefix}-reconstruct",
                ROLLSTREAM_RECONSTRUCT_WAIT_FOR_CALLS_S="10",
            )
        else:
            env = service_env(
                self.kafka,
                state,
                ROLLSTREAM_SCORE_GROUP_ID=f"{prefix}-score",
                ROLLSTREAM_SCORE_WORK_ROOT=str(self.tmp_path / name),
                ROLLSTREAM_SCORE_EVALUATOR_TIMEOUT_S="60",
            )
        service = Service(name, [kind], env, self.tmp_path / f"{name}.log")
        self.services[name] = service
        service.start()
        if kind == "node":
            await until(self._answers(name), 60, f"{name}'s API answers", interval=0.2)
        return name

    def leave(self, name: str) -> None:
        """Stop ``name`` cleanly (SIGTERM; a node hands its partitions over)."""
        self.gone.add(name)
        self.services[name].stop(timeout=120)

    def kill(self, name: str) -> None:
        """SIGKILL ``name``: no clean-up runs."""
        self.gone.add(name)
        self.services[name].kill()

    def _answers(self, name: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            try:
                async with (
                    aiohttp.ClientSession(base_url=self.node_urls[name]) as http,
                    http.get("/health") as reply,
                ):
                    return reply.status == 200
            except aiohttp.ClientError:
                await self.poll()
                return False

        return check

    async def events_leader(self) -> int:
        """The broker leading the most partitions of the events topic."""
        admin = make_admin(self.kafka)
        await admin.start()
        try:
            (topic,) = await admin.describe_topics([self.topics.events])
        finally:
            await admin.close()
        leaders = collections.Counter(int(p["leader"]) for p in topic["partitions"])
        return leaders.most_common(1)[0][0]

    async def submit(self, tasks: int, samples: int, first: int = 0) -> None:
        """Tasks ``first``.. into the tasks topic, round-robin over its partitions."""
        producer = make_producer(self.kafka)
        await producer.start()
        serializer = AvroSerializer()
        try:
            for i in range(first, first + tasks):
                task = task_from_document(cluster_task(i, samples))
                await producer.send_and_wait(
                    self.topics.tasks,
                    serializer.encode(task),
                    key=task.task_id.encode(),
                    partition=i % PARTITIONS,
                )
        finally:
            await producer.stop()

    async def until_ended(self, sessions: int) -> None:
        """Wait until ``sessions`` sessions have ended."""

        async def progressed() -> bool:
            await self.poll()
            return self.ended() >= sessions

        await until(progressed, 180, f"{sessions} sessions ended", interval=0.2)

    async def run_tasks(
        self, tasks: int, samples: int, fault: Callable[[], Awaitable[None]], after_ended: int
    ) -> Outcome:
        """Submit the tasks, run ``fault`` once ``after_ended`` sessions ended, wait for all."""
        await self.submit(tasks, samples)
        await self.until_ended(after_ended)
        await fault()
        return await self.drain(tasks * samples)

    async def drain(self, expected: int) -> Outcome:
        """Wait until ``expected`` sessions completed and each is reconstructed and scored."""

        async def drained() -> bool:
            await self.poll()
            sessions = self._sessions()
            completed = self._completions()
            trajectories = {t.session_id for t in self.readers[1].of(Trajectory)}
            scored = {s.trajectory.session_id for s in self.readers[2].of(Scored)}
            return len(completed) >= expected and trajectories >= sessions <= scored

        await until(drained, 300, "every session reconstructed and scored", interval=0.3)
        for reader in self.readers:
            await reader.settle(2.0)
        return self._outcome()

    def _completions(self) -> collections.Counter[tuple[str, int]]:
        return collections.Counter(
            (e.task_id, e.sample_index)
            for e in self.events.of(SessionEnded)
            if e.status is not SessionStatus.CANCELLED
        )

    def _sessions(self) -> set[str]:
        return {s.session_id for s in self.events.of(SessionStarted)}

    def _outcome(self) -> Outcome:
        sessions = self._sessions()
        ended = {e.session_id: e for e in self.events.of(SessionEnded)}
        calls = self.events.of(CallRecord)
        call_ids = [c.call_id for c in calls]
        trajectories = self.readers[1].of(Trajectory)
        scored = self.readers[2].of(Scored)
        served = self.backend.served.ok
        # A node handing its partitions over cancels the sessions still running after its
        # handoff timeout (their samples run again elsewhere): not an error, and their cut
        # calls are recorded as such.
        cancelled = {s for s, e in ended.items() if e.status is SessionStatus.CANCELLED}
        ok = {c.call_id for c in calls if c.error is None}
        return Outcome(
            sessions=sessions,
            calls_served=served,
            calls_recorded=len(set(call_ids)),
            calls_ok=len(ok),
            lost_calls=max(0, served - len(ok)),
            lost_trajectories=len(sessions - {t.session_id for t in trajectories}),
            lost_scores=len(sessions - {s.trajectory.session_id for s in scored}),
            duplicated_trajectories=repeats([t.session_id for t in trajectories]),
            duplicated_scores=repeats([s.trajectory.session_id for s in scored]),
            failed_sessions=[
                s
                for s, e in ended.items()
                if e.status not in (SessionStatus.COMPLETED, SessionStatus.CANCELLED)
            ],
            failed_calls=sum(
                1 for c in calls if c.error is not None and c.session_id not in cancelled
            ),
            cancelled_sessions=sorted(cancelled),
            not_complete=[
                t.session_id for t in trajectories if t.status is not TrajectoryStatus.COMPLETE
            ],
            samples_twice=sum(n - 1 for n in self._completions().values()),
            by_node=dict(collections.Counter(s.node_id for s in self.events.of(SessionStarted))),
        )


async def wait_in_sync(kafka: KafkaSettings, timeout: float = 120.0) -> None:
    """Until every partition of every topic has all its replicas in sync again."""

    async def in_sync() -> bool:
        admin = make_admin(kafka)
        await admin.start()
        try:
            names = await admin.list_topics()
            topics = await admin.describe_topics(names)
        finally:
            await admin.close()
        return all(len(p["isr"]) == len(p["replicas"]) for t in topics for p in t["partitions"])

    await until(in_sync, timeout, "every replica back in sync", interval=1.0)


@asynccontextmanager
async def cluster_pipeline(
    cluster: LocalCluster,
    kafka: KafkaSettings,
    tmp_path: Path,
    *,
    nodes: int = 1,
    reconstructors: int = 1,
    scorers: int = 1,
    max_run: int = 8,
) -> AsyncIterator[ClusterRun]:
    """The pipeline on ``cluster``: topics, backend, and the service processes asked for."""
    names = TopicNames(kafka.topic_prefix)
    async with TopicAdmin(kafka) as admin:
        await admin.create(topic_specs(names, partitions=PARTITIONS), 3)
    async with (
        counting_backend(tmp_path / "state", ttft_ms=100, tpot_ms=5) as backend,
        topic_readers(kafka, names.events, names.trajectories, names.scored) as readers,
    ):
        run = ClusterRun(cluster, kafka, names, backend, readers, tmp_path, max_run=max_run)
        try:
            for kind, count in (
                ("reconstruct", reconstructors),
                ("score", scorers),
                ("node", nodes),
            ):
                for _ in range(count):
                    await run.add(kind)
            yield run
        finally:
            # Nodes first, then their interceptors, which record the nodes' last calls.
            for service in reversed(list(run.services.values())):
                service.stop()
            for interceptor in run.interceptors:
                await interceptor.stop()
