"""``rollstream bench outage``: what a broker outage costs the streams an interceptor forwards.

While the broker is away the capture publisher spools (an fsync'd append every retry interval),
and once it is back it drains the spool (segment reads, an fsync'd offset per batch). That disk
work runs either on the event loop that also forwards the harness's streams (``inline``: how the
publisher worked before) or on the publisher's own disk thread (``thread``: how it works now).
Both run side by side in one run, in alternating order: one publisher at a steady rate of
CallRecord-sized records into a broker port nobody listens on for ``outage_s``, then a broker
started on that port, load still running, until everything is acknowledged. A probe on the same
loop sleeps ``probe_ms`` at a time; how late it wakes is how long a streamed chunk forwarded on
that loop waits behind the publisher.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.broker import BrokerSettings, LocalBroker
from rollstream.host import free_port
from rollstream.kafka.admin import TopicAdmin
from rollstream.producers.publisher.backlog import DiskThread
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.schemas import TopicSpec
from rollstream.settings import KafkaSettings, StatePaths

Progress = Callable[[str], None]
VARIANTS = ("inline", "thread")


@dataclass(frozen=True)
class OutageBenchConfig:
    """The sizes of one run."""

    outage_s: float = 300.0
    rate: float = 100.0  # records a second, from the first second to the end of the drain
    record_bytes: int = 16_384  # a delta-encoded CallRecord of a long agent call
    probe_ms: float = 10.0
    drain_timeout_s: float = 900.0


class LoopProbe:
    """How late a sleep of ``interval_s`` wakes on this loop, per ``phase`` (set by the caller).

    What a streamed chunk forwarded on the same loop waits behind whatever else runs there.
    """

    def __init__(self, interval_s: float, phase: str) -> None:
        self.interval_s = interval_s
        self.phase = phase
        self.lags: dict[str, list[float]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Sleep and measure until ``stop`` is set."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            began = loop.time()
            await asyncio.sleep(self.interval_s)
            late = loop.time() - began - self.interval_s
            self.lags.setdefault(self.phase, []).append(late)

    def summary(self, phase: str) -> dict[str, float]:
        """``phase``'s lateness: samples, p50, p99 and max in ms, and wakes over 100 ms."""
        return lateness(self.lags.get(phase, []))


async def _load(publisher: CapturePublisher, rate: float, size: int, stop: asyncio.Event) -> int:
    """Publish at ``rate`` until ``stop``; how many records."""
    loop = asyncio.get_running_loop()
    began, sent = loop.time(), 0
    while not stop.is_set():
        delay = began + sent / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        publisher.publish(b"session-%d" % (sent % 64), os.urandom(size))
        sent += 1
    return sent


def lateness(lags: list[float]) -> dict[str, float]:
    """Samples, p50, p99 and max of ``lags`` (seconds) in ms, and how many are over 100 ms."""
    ordered = sorted(lags) or [0.0]
    return {
        "samples": len(lags),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "over_100ms": sum(1 for lag in lags if lag > 0.1),
    }


async def one_variant(
    config: OutageBenchConfig, variant: str, workdir: Path, progress: Progress
) -> dict[str, Any]:
    """One outage and drain with the disk work ``inline`` or on its ``thread``."""
    port = free_port()
    kafka = KafkaSettings(bootstrap_servers=f"127.0.0.1:{port}", topic_prefix=f"outage-{variant}")
    topic = f"outage-{variant}"
    broker = LocalBroker(
        BrokerSettings(port=port, data_dir=workdir / "kafka", heap="512m", start_timeout=180),
        StatePaths(state_dir=workdir / "state"),
        record_state=False,
        outlive_parent=False,
    )
    publisher = CapturePublisher(kafka, PublisherSettings(), topic, workdir / "spool")
    if variant == "inline":
        publisher._disk = DiskThread(inline=True)  # the old behaviour, for comparison
    probe, stop = LoopProbe(config.probe_ms / 1000, "outage"), asyncio.Event()
    await publisher.start()
    probing = asyncio.create_task(probe.run(stop))
    loading = asyncio.create_task(_load(publisher, config.rate, config.record_bytes, stop))
    peak_spool = 0
    try:
        deadline = time.monotonic() + config.outage_s
        while time.monotonic() < deadline:
            await asyncio.sleep(1)
            peak_spool = max(peak_spool, publisher.metrics.spool_bytes)
        progress(f"  {variant}: {publisher.metrics.spooled:,} records spooled; broker back")
        probe.phase = "drain"
        back = time.monotonic()
        await asyncio.to_thread(broker.start)
        async with TopicAdmin(kafka) as admin:
            await admin.create([TopicSpec(topic, 3)])
        drain_deadline = back + config.drain_timeout_s
        while publisher.metrics.spool_bytes > 0 or not publisher.metrics.connected:
            if time.monotonic() > drain_deadline:
                raise TimeoutError(f"{variant}: the spool did not drain in time")
            await asyncio.sleep(0.5)
        drained_s = time.monotonic() - back
    finally:
        stop.set()
        sent = await loading
        await probing
        await publisher.stop(timeout=60)
        await asyncio.to_thread(broker.stop)
    m = publisher.metrics
    return {
        "variant": variant,
        "records": sent,
        "spooled": m.spooled,
        "peak_spool_mb": round(peak_spool / 1e6, 1),
        "acknowledged": m.published + m.drained,
        "lost": sent - m.published - m.drained,
        "drain_s": round(drained_s, 1),
        "outage": probe.summary("outage"),
        "drain": probe.summary("drain"),
    }


async def run_outage_bench(config: OutageBenchConfig, progress: Progress = print) -> dict[str, Any]:
    """Both variants, each on a broker and spool of its own (removed afterwards)."""
    order = list(VARIANTS) if int(time.time()) % 2 else list(reversed(VARIANTS))
    results = []
    for variant in order:
        progress(
            f"outage: {variant}, {config.outage_s:g} s without a broker at {config.rate:g} "
            f"records/s of {config.record_bytes:,} bytes, then the drain"
        )
        with tempfile.TemporaryDirectory(prefix=f"rollstream-outage-{variant}-") as tmp:
            results.append(await one_variant(config, variant, Path(tmp), progress))
    results.sort(key=lambda r: VARIANTS.index(r["variant"]))
    return {"config": asdict(config), "order": order, "variants": results}


def outage_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: how late the loop wakes during the outage and the drain."""
    config = result["config"]
    lines = [
        "## A broker outage and the streams (`rollstream bench outage`)",
        "",
        f"One capture publisher at {config['rate']:g} records/s of {config['record_bytes']:,} "
        f"bytes; no broker for {config['outage_s']:g} s (records spool), then a broker started "
        "on its port with the load still running, until every record is acknowledged. A probe "
        f"on the publisher's event loop sleeps {config['probe_ms']:g} ms at a time: its lateness "
        "is what a streamed chunk forwarded on that loop waits. `inline`: the spool's disk work "
        "on the loop (before issue 36's fix); `thread`: on the publisher's disk thread. Side by "
        f"side in one run (order: {', '.join(result['order'])}).",
        "",
        "| disk work | phase | probe wakes late: p50 / p99 / max ms | wakes > 100 ms | "
        "spooled | drain s | lost |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for v in result["variants"]:
        for phase in ("outage", "drain"):
            s = v[phase]
            lines.append(
                f"| {v['variant']} | {phase} | {s['p50_ms']} / {s['p99_ms']} / {s['max_ms']} | "
                f"{s['over_100ms']} | {v['spooled']:,} | {v['drain_s']} | {v['lost']} |"
            )
    lines.append("")
    return lines
