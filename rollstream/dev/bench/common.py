"""Helpers shared by the benchmarks: percentiles, process CPU time, machine description."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp


def abba[T](items: Sequence[T], round_: int) -> Sequence[T]:
    """The order to measure ``items`` in at round ``round_`` (0-based): as given, then reversed.

    Every benchmark that compares variants measures each of them in every round, in ABBA
    order, so that neither a neighbour's burst on a shared machine nor the order itself (cold
    caches first, a warm broker last) favours one; ratios are then taken per round.
    """
    return items if round_ % 2 == 0 else items[::-1]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time of each live thread of a process so far, in nanoseconds (/proc schedstat).

    Finer than :func:`process_cpu_seconds` (clock ticks of 10 ms), for small amounts such as
    an idle process's; see :func:`cpu_ns_between`.
    """
    times: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            times[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    if not times:
        raise RuntimeError(f"no /proc schedstat for process {pid}")
    return times


def cpu_ns_between(before: dict[int, int], after: dict[int, int]) -> int:
    """CPU used between two :func:`thread_cpu_ns` snapshots.

    Threads started since count whole; a thread that ended in between is missed (its time
    cannot be read any more).
    """
    return sum(ns - before.get(tid, 0) for tid, ns in after.items())


def status_kb(pid: int | str = "self") -> dict[str, int]:
    """The memory lines of a process's /proc status (VmRSS, VmHWM, ...), in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name.startswith("Vm"):
            out[name] = int(value.split()[0])
    return out


def process_rss_mb(pid: int) -> float:
    """Resident memory of a process in MB."""
    kb = status_kb(pid).get("VmRSS")
    return kb / 1024 if kb is not None else float("nan")


def reference_loop_ms(repeats: int = 3) -> float:
    """CPU milliseconds of a fixed pure-Python loop, the best of ``repeats``: the machine's speed.

    Shared machines run at different speeds on different days; every figure of a run scales
    with it, ratios within a run do not. Recorded with each run so runs can be compared.
    """
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.process_time() - started)
    return round(best * 1000, 1)


def machine() -> dict[str, Any]:
    """What the numbers were measured on, and how fast it ran (``reference_loop_ms``)."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "reference_loop_ms": reference_loop_ms(),
    }


def spawn_pinned(
    cmd: list[str], core: int | None, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with its output in ``log``, pinned to ``core`` where the OS allows it."""

    def pin() -> None:
        if core is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {core})

    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=pin, env=env)


async def wait_healthy(url: str, timeout: float = 60) -> None:
    """Return once ``url`` answers 200; RuntimeError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy")
