"""Pieces the capture publisher's fault tests share: a broker of the test's own, calls through
an interceptor process, its admin port asked with a deadline, and the events topic counted by
call id.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai

from rollstream.dev.broker import BrokerInfo, BrokerSettings, LocalBroker
from rollstream.host import free_port
from rollstream.interceptor.sessions import SESSION_HEADER
from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import CallRecord, TopicNames, topic_specs
from rollstream.settings import KafkaSettings, StatePaths
from tests.chaos.interceptor_proc import InterceptorProcess
from tests.chaos.pipeline import MODEL, topic_readers
from tests.conftest import JAR_CACHE


@asynccontextmanager
async def own_broker(
    tmp_path: Path, prefix: str
) -> AsyncIterator[tuple[LocalBroker, KafkaSettings]]:
    """A broker of the test's own on a fixed port, with the rollstream topics; stopped after.

    A stopped (SIGSTOP) broker is continued first, so that its stop can complete.
    """
    broker = LocalBroker(
        BrokerSettings(
            port=free_port(), data_dir=tmp_path / "kafka", heap="512m", start_timeout=120
        ),
        StatePaths(state_dir=tmp_path / "broker-state", cache_dir=JAR_CACHE),
        record_state=False,
        outlive_parent=False,
    )
    info = await asyncio.to_thread(broker.start)
    kafka = KafkaSettings(bootstrap_servers=info.bootstrap_servers, topic_prefix=prefix)
    try:
        async with TopicAdmin(kafka) as admin:
            await admin.create(topic_specs(TopicNames(prefix), partitions=3))
        yield broker, kafka
    finally:
        running = broker.running()
        if running is not None:
            signal_quietly(running, signal.SIGCONT)
        await asyncio.to_thread(broker.stop)


def signal_quietly(info: BrokerInfo, signum: signal.Signals) -> None:
    """Signal the broker's JVM (gone already is fine)."""
    with suppress(ProcessLookupError):
        os.kill(info.pid, signum)


async def kill_broker(broker: LocalBroker, info: BrokerInfo) -> None:
    """SIGKILL the broker (stopped or not) and reap it: its ports are free once this returns."""
    signal_quietly(info, signal.SIGKILL)
    # stop() waits on the child process itself: /proc alone shows a dying JVM as gone while it
    # still holds its sockets.
    await asyncio.to_thread(broker.stop, 0.1)


@dataclass
class Calls:
    """What the harness side saw: sessions called, and the errors."""

    made: int = 0
    errors: list[str] = field(default_factory=list)

    async def chat(self, proxy: InterceptorProcess, n: int, label: str) -> None:
        """``n`` chat calls through the proxy, one session each, one after the other."""
        async with openai.AsyncOpenAI(
            base_url=f"{proxy.url}/v1", api_key="unused", max_retries=0, timeout=30
        ) as client:
            for _ in range(n):
                session = f"{label}-{uuid.uuid4().hex[:8]}"
                try:
                    # Named by header, as a launcher names its sessions (a key nobody
                    # registered would be recorded as its keyed hash).
                    named = client.with_options(default_headers={SESSION_HEADER: session})
                    await named.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
                    )
                except openai.OpenAIError as exc:
                    self.errors.append(f"{label}: {type(exc).__name__}: {exc}")
                self.made += 1


async def admin(proxy: InterceptorProcess, path: str, timeout: float = 5.0) -> Any:
    """GET the admin port's ``path`` (JSON or Prometheus text); AssertionError if it hangs."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http,
            http.get(f"{proxy.admin_url}{path}") as response,
        ):
            response.raise_for_status()
            if path == "/metrics":
                text = await response.text()
                return {
                    line.split()[0]: float(line.split()[1])
                    for line in text.splitlines()
                    if line and not line.startswith("#")
                }
            return await response.json()
    except TimeoutError:
        raise AssertionError(f"the admin port did not answer {path} within {timeout:g} s") from None


def sent(metrics: dict[str, float]) -> float:
    """Records acknowledged by the broker: straight from the queue, or drained from the spool."""
    return metrics.get("rollstream_records_published_total", 0.0) + metrics.get(
        "rollstream_records_drained_total", 0.0
    )


async def wait_metrics(
    proxy: InterceptorProcess, want: dict[str, float], timeout: float = 60.0
) -> dict[str, float]:
    """Poll /metrics until every ``want`` counter is at least (``_alarm``: exactly) its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        metrics: dict[str, float] = await admin(proxy, "/metrics")
        if all(
            metrics.get(k, 0.0) == v
            if k.endswith(("_alarm", "_bytes"))
            else metrics.get(k, 0.0) >= v
            for k, v in want.items()
        ):
            return metrics
        assert loop.time() < deadline, f"metrics {metrics} never reached {want}"
        await asyncio.sleep(0.2)


async def wait_sent(proxy: InterceptorProcess, n: int, timeout: float = 90.0) -> dict[str, float]:
    """Poll /metrics until ``n`` records were acknowledged and nothing waits in the spool."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        metrics: dict[str, float] = await admin(proxy, "/metrics")
        if sent(metrics) >= n and metrics.get("rollstream_spool_bytes") == 0:
            return metrics
        assert loop.time() < deadline, f"metrics {metrics}: {n} records never sent"
        await asyncio.sleep(0.2)


async def calls_by_id(kafka: KafkaSettings, served: int) -> dict[str, list[CallRecord]]:
    """Every copy of each call in the events topic, by call id: read until ``served`` ids (or
    60 s, if some are lost), then 3 s more, so that copies arriving late are counted too.
    """
    async with topic_readers(kafka, TopicNames(kafka.topic_prefix).events) as [events]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while len({c.call_id for c in events.of(CallRecord)}) < served and loop.time() < deadline:
            await events.poll()
        await events.settle(3.0)
    copies: dict[str, list[CallRecord]] = collections.defaultdict(list)
    for call in events.of(CallRecord):
        copies[call.call_id].append(call)
    return dict(copies)


def resent_and_differing(copies: dict[str, list[CallRecord]]) -> tuple[int, int]:
    """Copies beyond the first (re-sent, at least once: readers drop them by call id) and calls
    whose copies differ, which no reader could drop: a real duplicate.
    """
    resent = sum(len(c) - 1 for c in copies.values())
    differing = sum(1 for c in copies.values() if any(other != c[0] for other in c[1:]))
    return resent, differing
