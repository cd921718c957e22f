"""What ``bench pipeline`` and ``bench instances`` share: input, services, and their output.

Both feed the reconstructor copies of a few synthetic sessions and run ``rollstream
reconstruct`` and ``rollstream score`` as subprocesses (as they are deployed), each service in
a group of its own per run. :class:`PipelineRun` starts them, samples their CPU time and memory
every 50 ms, and reads the trajectories and scored topics with one ``read_committed`` consumer,
noting when each record became readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rollstream.dev.bench.common import process_cpu_seconds, process_rss_mb, spawn_pinned
from rollstream.dev.bench.load import renamed
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.schemas import AvroSerializer, TopicNames
from rollstream.settings import KafkaSettings


class ServicesConfig(Protocol):
    """The fields of a bench config that size the reconstructor's input and tune the services."""

    @property
    def sessions(self) -> int:
        """Sessions fed to the reconstructor."""

    @property
    def calls(self) -> int:
        """Calls per session."""

    @property
    def system_tokens(self) -> int:
        """Tokens of the system prompt (the first prompt's size)."""

    @property
    def tool_result_tokens(self) -> int:
        """Tokens of each tool result a prompt grows by."""

    @property
    def completion_tokens(self) -> int:
        """Tokens of each completion a prompt grows by."""

    @property
    def strategy(self) -> str:
        """The reconstructor's ``--strategy``."""

    @property
    def evaluator(self) -> str:
        """The scorer's ``--default-evaluator``."""

    @property
    def reconstructor_batch_records(self) -> int:
        """The reconstructor's ``--max-batch-records`` (one transaction per batch)."""

    @property
    def scorer_batch_records(self) -> int:
        """The scorer's ``--max-batch-records``."""


def input_shape(config: ServicesConfig) -> SyntheticShape:
    """The shape of the reconstructor's input sessions."""
    return SyntheticShape(
        turns=config.calls,
        system_tokens=config.system_tokens,
        tool_result_tokens=config.tool_result_tokens,
        completion_tokens=config.completion_tokens,
    )


def input_summary(config: ServicesConfig) -> dict[str, Any]:
    """The reconstructor's input as the results state it: sessions, calls, the last prompt."""
    return {
        "sessions": config.sessions,
        "calls": config.sessions * config.calls,
        "prompt_tokens_last": config.system_tokens
        + (config.calls - 1) * (config.completion_tokens + config.tool_result_tokens),
    }


def session_load(
    prefix: str, count: int, pool: int, shape: SyntheticShape
) -> list[tuple[str, list[bytes]]]:
    """``count`` sessions (copies of ``pool`` drawn ones), each as its id and encoded records."""
    serializer = AvroSerializer()
    drawn = [synthetic_session(f"{prefix}-pool-{i}", shape, seed=i) for i in range(pool)]
    out = []
    for n in range(count):
        sid = f"{prefix}-{n}"
        records = renamed(drawn[n % pool].records, f"{prefix}-pool-{n % pool}", sid)
        out.append((sid, [serializer.encode(r) for r in records]))
    return out


def bench_group(kafka: KafkaSettings, service: str) -> str:
    """The consumer group of ``service`` in this run (it also names its transactional ids).

    A run's topic prefix is its own, so the group is too: another run's must not fence it.
    """
    return f"{kafka.topic_prefix}-bench-{service}"


def reconstruct_args(config: ServicesConfig, group: str) -> list[str]:
    """``rollstream reconstruct``'s command line in group ``group``."""
    return [
        *("reconstruct", "--strategy", config.strategy, "--group", group),
        *("--max-batch-records", str(config.reconstructor_batch_records)),
    ]


def score_args(config: ServicesConfig, group: str, *extra: str) -> list[str]:
    """``rollstream score``'s command line in group ``group``, ``extra`` options added."""
    return [
        *("score", "--group-id", group, *extra),
        *("--default-evaluator", config.evaluator),
        *("--max-batch-records", str(config.scorer_batch_records)),
    ]


@dataclass
class Arrivals:
    """What the reader saw on one topic: when each session first arrived, and every record."""

    first: dict[str, float] = field(default_factory=dict)
    seen: Counter[str] = field(default_factory=Counter)
    times: list[float] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    # Off where only the times matter: Scored records carry their whole trajectory.
    keep_values: bool = True

    def add(self, key: bytes | None, value: bytes | None, now: float) -> None:
        """Note one record readable at ``now``."""
        # Both outputs are keyed by group id, which is g-<session id> for the bench's sessions.
        session = (key or b"").decode().removeprefix("g-")
        self.first.setdefault(session, now)
        self.seen[session] += 1
        self.times.append(now)
        if self.keep_values:
            self.values.append(value or b"")

    def count(self, prefix: str) -> int:
        """Sessions of ``prefix`` seen."""
        return sum(1 for s in self.first if s.startswith(prefix))

    def duplicates(self, prefix: str) -> int:
        """Records beyond the first for sessions of ``prefix`` (exactly-once says 0)."""
        return sum(n - 1 for s, n in self.seen.items() if s.startswith(prefix))

    def take(self) -> tuple[list[float], list[bytes]]:
        """The arrival times and values so far, forgetting them (trajectories are large)."""
        taken = self.times, self.values
        self.times, self.values = [], []
        return taken


def run_queue_seconds(pid: int) -> float:
    """Time the process's threads were runnable but waiting for a CPU (/proc schedstat).

    On a busy machine a service that gets little CPU time may be waiting for a core, not for
    Kafka: this tells the two apart.
    """
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that just ended
            total += int(stat.read_text().split()[1])
    return total / 1e9


class ServiceProcess:
    """One service subprocess with its log; :meth:`sample` notes its CPU time and RSS."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        self.process: subprocess.Popen[bytes] = spawn_pinned(cmd, None, log, env)
        # (time, cpu seconds, rss MB, seconds waiting for a CPU)
        self.samples: list[tuple[float, float, float, float]] = []

    def sample(self) -> None:
        """Note the process's CPU time, RSS and run-queue wait now."""
        if self.process.poll() is None:
            pid = self.process.pid
            now = time.perf_counter()
            cpu, rss = process_cpu_seconds(pid), process_rss_mb(pid)
            self.samples.append((now, cpu, rss, run_queue_seconds(pid)))

    def _between(self, start: float, end: float, index: int) -> float:
        if not self.samples:
            return float("nan")

        def at(t: float) -> float:
            return min(self.samples, key=lambda s: abs(s[0] - t))[index]

        return at(end) - at(start)

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds between two times (the samples nearest to them)."""
        return self._between(start, end, 1)

    def waited_between(self, start: float, end: float) -> float:
        """Seconds spent waiting for a CPU between two times (the samples nearest to them)."""
        return self._between(start, end, 3)

    def peak_rss(self, until: float) -> float:
        """The largest RSS sampled up to ``until``, in MB."""
        return max((s[2] for s in self.samples if s[0] <= until), default=float("nan"))

    def check(self) -> None:
        """RuntimeError with the log's tail if the process has exited."""
        if self.process.poll() is not None:
            raise RuntimeError(
                f"the {self.name} exited with {self.process.returncode}: "
                f"{self.log.read_text()[-2000:]}"
            )

    def stop(self) -> None:
        """SIGTERM (a clean stop), SIGKILL after 30 s."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class PipelineRun:
    """The services, the reader and the sampler of one run: ``async with PipelineRun(...)``."""

    def __init__(self, kafka: KafkaSettings, log_dir: Path, timeout_s: float) -> None:
        self.kafka, self.log_dir, self.timeout_s = kafka, log_dir, timeout_s
        self.names = TopicNames(kafka.topic_prefix)
        self.env = os.environ | {
            "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "ROLLSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
        }
        self.trajectories, self.scored = Arrivals(), Arrivals()
        self.services: list[ServiceProcess] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start_service(self, name: str, *args: str) -> ServiceProcess:
        """Start ``rollstream <args>`` (logging warnings only) as a subprocess."""
        cmd = [sys.executable, "-m", "rollstream", "--log-level", "WARNING", *args]
        service = ServiceProcess(name, cmd, self.env, self.log_dir / f"{name}.log")
        self.services.append(service)
        return service

    async def __aenter__(self) -> PipelineRun:
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._sample())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await task
        self.stop_services()

    async def _read(self) -> None:
        consumer = make_consumer(self.kafka)
        await consumer.start()
        try:
            tps = []
            for topic in (self.names.trajectories, self.names.scored):
                tps += await topic_partitions(consumer, topic) or []
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=50)
                now = time.perf_counter()
                for tp, messages in batch.items():
                    into = self.scored if tp.topic == self.names.scored else self.trajectories
                    for message in messages:
                        into.add(message.key, message.value, now)
        finally:
            await consumer.stop()

    async def _sample(self) -> None:
        while not self._stop.is_set():
            for service in self.services:
                service.sample()
            await asyncio.sleep(0.05)

    async def wait_for(self, arrivals: Arrivals, prefix: str, count: int) -> None:
        """Until ``count`` sessions of ``prefix`` arrived; errors as :meth:`wait_until`'s."""
        await self.wait_until(
            lambda: arrivals.count(prefix) >= count,
            lambda: f"{arrivals.count(prefix)} of {count} {prefix} sessions arrived",
        )

    async def wait_until(self, done: Callable[[], bool], status: Callable[[], str]) -> None:
        """Until ``done()``; RuntimeError if a service or the reader failed, else TimeoutError."""
        deadline = time.monotonic() + self.timeout_s
        while not done():
            for service in self.services:
                service.check()
            for task in self._tasks:
                if task.done():
                    task.result()  # the reader's or sampler's error, if it has one
                    raise RuntimeError("the reader stopped")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{status()} within {self.timeout_s} s")
            await asyncio.sleep(0.05)

    def stop_services(self) -> None:
        """Stop every service started so far (a clean stop each), and forget them."""
        for service in self.services:
            service.stop()
        self.services = []
