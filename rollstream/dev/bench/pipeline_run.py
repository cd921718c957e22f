"""The moving parts of ``bench pipeline``: service subprocesses, and a reader of their output.

:class:`PipelineRun` starts the services as subprocesses (as they are deployed), samples their
CPU time and memory every 50 ms, and reads the trajectories and scored topics with one
``read_committed`` consumer, noting when each record became readable.
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

from rollstream.dev.bench.common import process_cpu_seconds, process_rss_mb, spawn_pinned
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings


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
    """Time the process's threads spent runnable but waiting for a CPU, from /proc schedstat.

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
            self.samples.append(
                (
                    time.perf_counter(),
                    process_cpu_seconds(pid),
                    process_rss_mb(pid),
                    run_queue_seconds(pid),
                )
            )

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
        for service in self.services:
            service.stop()

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
        """Until ``count`` sessions of ``prefix`` arrived.

        RuntimeError if a service exited or the reader failed; TimeoutError after the timeout.
        """
        await self.wait_until(
            lambda: arrivals.count(prefix) >= count,
            lambda: f"{arrivals.count(prefix)} of {count} {prefix} sessions arrived",
        )

    async def wait_until(self, done: Callable[[], bool], status: Callable[[], str]) -> None:
        """Until ``done()``; errors as :meth:`wait_for`'s, the timeout's saying ``status()``."""
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
