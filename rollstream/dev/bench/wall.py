"""``rollstream bench wall``: what the network wall costs a session, walled against unwalled.

Two costs, each measured side by side in the same rounds (alternating, so the shared machine's
mood falls on both alike) and reported as ratios:

- **start**: a process started by ``run_harness`` with a wall (new user and network namespaces,
  loopback up, a listener handed over, the relay started) against one without. It is paid once
  per harness and once per scorer check.
- **relay**: what the relay adds to the interceptor's traffic, against connecting directly to
  the same echo server on loopback: request/response round trips of ``message_bytes`` on one
  connection (a harness's calls on a keep-alive connection, or a stream's chunks), new
  connections (one per call), and bulk bytes one way (a long streamed answer).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.bench.common import percentile
from rollstream.dev.bench.runner import medians, ratios, run_rounds, table
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.sandbox.netns import Endpoint, Wall, listen_loopback
from rollstream.sandbox.relay import PortRelay

MODES = ("direct", "walled")
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class WallBenchConfig:
    """The sizes of one run."""

    starts: int = 40
    exchanges: int = 2000
    connections: int = 300
    message_bytes: int = 1024
    bulk_mb: int = 256
    rounds: int = 3


@asynccontextmanager
async def _echo() -> AsyncIterator[int]:
    """Echoes what it reads; a connection whose first bytes are ``B<n>`` gets n MB and EOF."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(_CHUNK)
        if first.startswith(b"B"):
            block = b"x" * (1 << 20)
            for _ in range(int(first[1:].strip())):
                writer.write(block)
                await writer.drain()
        else:
            data = first
            while data:
                writer.write(data)
                await writer.drain()
                data = await reader.read(_CHUNK)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def _round_trips(port: int, count: int, size: int) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    message = b"m" * size
    took = []
    for _ in range(count):
        began = time.perf_counter()
        writer.write(message)
        await reader.readexactly(size)
        took.append(time.perf_counter() - began)
    writer.close()
    return took


async def _connects(port: int, count: int) -> float:
    began = time.perf_counter()
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"p")
        await reader.readexactly(1)
        writer.close()
    return (time.perf_counter() - began) / count


async def _bulk(port: int, megabytes: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    began = time.perf_counter()
    writer.write(b"B%d\n" % megabytes)
    received = 0
    while chunk := await reader.read(1 << 20):
        received += len(chunk)
    writer.close()
    if received != megabytes << 20:
        raise RuntimeError(f"bulk transfer got {received} of {megabytes << 20} bytes")
    return megabytes / (time.perf_counter() - began)


async def _traffic(config: WallBenchConfig, target: int, walled: bool) -> dict[str, float]:
    """One round of the three traffic shapes, straight to ``target`` or through a relay."""
    relay = None
    port = target
    try:
        if walled:
            listener = listen_loopback(0)
            port = listener.getsockname()[1]
            relay = PortRelay(listener, Endpoint("127.0.0.1", target))
            await relay.start()
        took = await _round_trips(port, config.exchanges, config.message_bytes)
        connect = await _connects(port, config.connections)
        bulk = await _bulk(port, config.bulk_mb)
    finally:
        if relay is not None:
            await relay.stop()
    return {
        "round_trip_p50_us": statistics.median(took) * 1e6,
        "round_trip_p99_us": percentile(took, 99) * 1e6,
        "connect_us": connect * 1e6,
        "bulk_mb_per_s": bulk,
    }


async def _start_ms(config: WallBenchConfig, root: Path, walled: bool, target: int) -> float:
    """Mean ms from spawn to exit of ``true`` under ``run_harness``, walled or not."""
    wall = Wall(Endpoint("127.0.0.1", target)) if walled else None
    launch = HarnessLaunch(["true"], {})
    began = time.perf_counter()
    for i in range(config.starts):
        where = root / f"{int(walled)}-{i}"
        await run_harness(launch, where / "home", where / "work", where / "logs", 30, wall)
    return (time.perf_counter() - began) / config.starts * 1000


async def run_wall_bench(
    config: WallBenchConfig, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Alternate direct and walled for ``config.rounds`` rounds; medians and walled/direct."""
    async with _echo() as target:
        with tempfile.TemporaryDirectory(prefix="rollstream-bench-wall-") as tmp:

            async def measure(mode: str, _: int) -> dict[str, float]:
                walled = mode == "walled"
                result = await _traffic(config, target, walled)
                result["start_ms"] = await _start_ms(config, Path(tmp), walled, target)
                return result

            samples = await run_rounds(
                MODES,
                config.rounds,
                measure,
                say,
                lambda r: (
                    f"start {r['start_ms']:.1f} ms, "
                    f"round trip {r['round_trip_p50_us']:.0f} µs, "
                    f"connect {r['connect_us']:.0f} µs, "
                    f"bulk {r['bulk_mb_per_s']:.0f} MB/s"
                ),
            )
    figures = medians(samples)
    return {
        "config": asdict(config),
        "modes": figures,
        "walled_over_direct": ratios(figures, "walled", "direct"),
    }


#: (key, label, unit) of the section's rows
_ROWS = (
    ("start_ms", "a harness process from spawn to exit", "ms"),
    ("round_trip_p50_us", "round trip of {size} bytes on one connection, p50", "µs"),
    ("round_trip_p99_us", "the same, p99", "µs"),
    ("connect_us", "a new connection and one byte back", "µs"),
    ("bulk_mb_per_s", "bulk, one way ({bulk} MB)", "MB/s"),
)


def wall_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: direct against walled, medians and their ratio."""
    config, modes, ratio = result["config"], result["modes"], result["walled_over_direct"]
    rows = [
        (
            label.format(size=config["message_bytes"], bulk=config["bulk_mb"]),
            f"{modes['direct'][key]:,} {unit}",
            f"{modes['walled'][key]:,} {unit}",
            ratio[key],
        )
        for key, label, unit in _ROWS
    ]
    return [
        "## Network wall (`rollstream bench wall`)",
        "",
        "What the network wall of a session costs (docs/security.md): a process started by "
        "`run_harness` in user and network namespaces of its own with the relay to one endpoint, "
        f"against one started without ({config['starts']} starts of `true` per round), and the "
        "relay's traffic against connecting straight to the same echo server on loopback "
        f"({config['exchanges']:,} round trips, {config['connections']} connections, "
        f"{config['bulk_mb']} MB one way per round). Client, relay and server share this "
        f"process's event loop, as the node's relay shares the node's. Median of "
        f"{config['rounds']} rounds alternating the modes.",
        "",
        *table(("measure", "direct", "walled", "walled / direct"), "lrrr", rows),
        "",
        "A harness call costs the model seconds; the relay's tens of microseconds per round trip "
        "and its bulk rate (hundreds of MB/s, against a stream of tokens at tens of kB/s) are "
        "far below what a session can notice.",
        "",
    ]
