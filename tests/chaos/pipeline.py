"""Pieces of a running pipeline the fault tests share: a counting backend, services as
processes, and readers that accumulate a topic's committed records.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer
from aiohttp.typedefs import Handler
from aiokafka import AIOKafkaConsumer

from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import AvroRecord, AvroSerializer
from rollstream.settings import KafkaSettings

MODEL = "rollstream-tiny"

#: Four tool calls, then the answer: five calls a session, each a few hundred ms with the
#: latency the tests give the backend, so sessions overlap the faults. Writes hello.txt first.
STEPS_SCENARIOS = """
scenarios:
  - name: steps
    turns:
      - text: I will create the file.
        tool_call: {tool: shell, arguments: {command: "echo polar > hello.txt"}}
      - tool_call: {tool: shell, arguments: {command: "cat hello.txt"}}
      - tool_call: {tool: shell, arguments: {command: "ls"}}
      - tool_call: {tool: shell, arguments: {command: "wc -c hello.txt"}}
    final_text: Done. hello.txt contains polar.
side_call_text: OK.
"""


@dataclass
class ServedCalls:
    """Chat calls the backend answered with 200, counted as it sends them."""

    ok: int = 0
    failed: int = 0


@dataclass
class CountingBackend:
    """The reference backend (scripted policy) on a free port, counting what it served."""

    url: str
    served: ServedCalls


def _write_scenarios(state_dir: Path, scenarios: str) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "scenarios.yaml"
    path.write_text(scenarios)
    return path


@asynccontextmanager
async def counting_backend(
    state_dir: Path, *, ttft_ms: float, tpot_ms: float, scenarios: str = STEPS_SCENARIOS
) -> AsyncIterator[CountingBackend]:
    """The scripted backend serving ``scenarios`` with the given latency."""
    path = await asyncio.to_thread(_write_scenarios, state_dir, scenarios)
    settings = BackendSettings(
        policy="scripted",
        scenarios=path,
        model=MODEL,
        max_model_len=262144,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
    )
    served = ServedCalls()

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.path == "/v1/chat/completions":
            if response.status == 200:
                served.ok += 1
            else:
                served.failed += 1
        return response

    app = Backend(settings, ChatTokenizer(default_tokenizer_dir())).app()
    app.middlewares.append(count)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield CountingBackend(str(server.make_url("")).rstrip("/"), served)
    finally:
        await server.close()


def service_env(kafka: KafkaSettings, state_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``python -m rollstream`` service process for this test."""
    return os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
        "ROLLSTREAM_STATE_DIR": str(state_dir),
        **extra,
    }


@dataclass
class Service:
    """``python -m rollstream <args>`` as a child process that can be killed and restarted."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        """Start (again), appending to the same log."""
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts + 1} ===\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rollstream", *self.args],
                env=self.env,
                stdout=out,
                stderr=out,
            )
        self.starts += 1

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no clean-up runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean stop), SIGKILL if it does not end in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, chars: int = 3000) -> str:
        """The end of its log, for assertion messages."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass
class TopicReader:
    """Every committed record of a topic from the beginning; ``poll`` reads on."""

    kafka: KafkaSettings
    topic: str
    records: list[AvroRecord] = field(default_factory=list)
    _consumer: AIOKafkaConsumer | None = None
    _serializer: AvroSerializer = field(default_factory=AvroSerializer)

    async def start(self, within_s: float = 30.0) -> None:
        """Assign every partition, from the beginning.

        A topic created a moment ago reaches each broker's metadata a little later (a cluster's
        run failed once on it): it is waited for, within ``within_s``.
        """
        consumer = make_consumer(self.kafka)
        await consumer.start()
        self._consumer = consumer
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while not (tps := await topic_partitions(consumer, self.topic)):
            assert loop.time() < deadline, f"no topic {self.topic} within {within_s:g} s"
            await asyncio.sleep(0.2)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)

    async def stop(self) -> None:
        """Close the consumer."""
        if self._consumer is not None:
            await self._consumer.stop()

    async def poll(self, timeout_ms: int = 300) -> list[AvroRecord]:
        """Read what arrived since the last poll; all records so far."""
        assert self._consumer is not None
        batch = await self._consumer.getmany(timeout_ms=timeout_ms)
        for messages in batch.values():
            for message in messages:
                self.records.append(self._serializer.decode_as(message.value or b"", AvroRecord))
        return self.records

    async def settle(self, seconds: float) -> list[AvroRecord]:
        """Keep reading for ``seconds``: an assertion of "exactly N" then sees any extra."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (remaining := deadline - loop.time()) > 0:
            await self.poll(int(min(remaining, 0.5) * 1000) + 1)
        return self.records

    def of[R: AvroRecord](self, model: type[R]) -> list[R]:
        """The records of one type."""
        return [r for r in self.records if isinstance(r, model)]


@asynccontextmanager
async def topic_readers(kafka: KafkaSettings, *topics: str) -> AsyncIterator[list[TopicReader]]:
    """Started readers of ``topics``, stopped afterwards."""
    readers = [TopicReader(kafka, topic) for topic in topics]
    try:
        for reader in readers:
            await reader.start()
        yield readers
    finally:
        for reader in readers:
            await reader.stop()


def repeats(ids: list[str]) -> int:
    """How many entries of ``ids`` repeat an earlier one."""
    return sum(n - 1 for n in collections.Counter(ids).values())
