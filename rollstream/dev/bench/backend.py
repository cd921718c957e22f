"""``rollstream bench backend``: streamed tokens per second and concurrent streams on one core.

The backend runs in its own process pinned to one core; the load generator runs on another
and opens N concurrent streaming chat requests (``ignore_eos``, fixed ``max_tokens``, the
latency model pacing each stream). Measured: tokens/s delivered, errors, time to first token
and inter-token gaps as the client sees them, and the backend's CPU time per token.

Also what the interceptor and reconstruction benchmarks share: a ``rollstream`` subprocess
(:func:`serving`) and ratios taken round by round (:func:`round_ratios`).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from rollstream.dev.bench.common import (
    percentile,
    process_cpu_seconds,
    process_rss_mb,
    spawn_pinned,
    wait_healthy,
)
from rollstream.dev.bench.runner import table
from rollstream.host import free_port

TARGETS = {"tokens_per_s": 2000, "concurrent_streams": 200}


def rollstream_command(*args: str) -> list[str]:
    """The command line of ``rollstream *args`` in this Python, logging warnings only."""
    return [sys.executable, "-m", "rollstream", "--log-level", "WARNING", *args]


@asynccontextmanager
async def serving(
    command: list[str],
    core: int | None,
    log: Path,
    env: dict[str, str] | None = None,
    health: str | None = None,
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``command`` running pinned to ``core`` (and ``health`` answering), stopped on exit."""
    process = spawn_pinned(command, core, log, env)
    try:
        if health is not None:
            await wait_healthy(health)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def round_ratios(
    over: Sequence[Mapping[str, Any]], under: Sequence[Mapping[str, Any]], key: str
) -> tuple[float | None, list[float] | None]:
    """``over[key] / under[key]`` round by round: the median and the range, rounded."""
    ratios = sorted(a[key] / b[key] for a, b in zip(over, under, strict=True) if b[key])
    if not ratios:
        return None, None
    return round(statistics.median(ratios), 2), [round(ratios[0], 2), round(ratios[-1], 2)]


@dataclass(frozen=True)
class BackendBenchConfig:
    """One benchmark run."""

    concurrency: tuple[int, ...] = (1, 50, 200, 400)
    max_tokens: int = 200
    tpot_ms: float = 20.0
    ttft_ms: float = 50.0
    policy: str = "tiny"
    server_core: int = 0
    client_core: int = 1


async def _one_stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[int, float, list[float]]:
    """Run one streaming request: (tokens, ttft seconds, inter-token gaps)."""
    began = time.perf_counter()
    tokens, first, gaps, last = 0, float("nan"), [], 0.0
    async with session.post(url, json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {await response.text()}")
        async for raw in response.content:
            line = raw.strip()
            if not line.startswith(b"data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or []
            got = len(choices[0].get("token_ids") or []) if choices else 0
            if got:
                now = time.perf_counter()
                if tokens == 0:
                    first = now - began
                else:
                    gaps.append(now - last)
                last = now
                tokens += got
    return tokens, first, gaps


async def _level(url: str, pid: int, n: int, config: BackendBenchConfig) -> dict[str, Any]:
    """The figures of one concurrency level."""
    body = {
        "model": "rollstream-tiny",
        "messages": [{"role": "user", "content": "Write a long story about polar bears."}],
        "stream": True,
        "return_token_ids": True,
        "max_tokens": config.max_tokens,
        "ignore_eos": True,
    }
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        cpu_before, began = process_cpu_seconds(pid), time.perf_counter()
        results = await asyncio.gather(
            *(_one_stream(session, url, body) for _ in range(n)), return_exceptions=True
        )
        seconds = time.perf_counter() - began
        cpu = process_cpu_seconds(pid) - cpu_before
    ok = [r for r in results if not isinstance(r, BaseException)]
    tokens = sum(r[0] for r in ok)
    ttfts = [r[1] * 1000 for r in ok]
    gaps = [g * 1000 for r in ok for g in r[2]]
    return {
        "concurrency": n,
        "streams_ok": sum(1 for r in ok if r[0] == config.max_tokens),
        "errors": len(results) - len(ok) + sum(1 for r in ok if r[0] != config.max_tokens),
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "ttft_p50_ms": round(percentile(ttfts, 50), 1),
        "ttft_p99_ms": round(percentile(ttfts, 99), 1),
        "itl_p50_ms": round(percentile(gaps, 50), 2),
        "itl_p99_ms": round(percentile(gaps, 99), 2),
        "server_cpu_s": round(cpu, 3),
        "server_cpu_us_per_token": round(cpu / max(tokens, 1) * 1e6, 1),
        "server_cpu_utilisation": round(cpu / seconds, 3),
        "server_rss_mb": round(process_rss_mb(pid), 1),
    }


async def run_backend_bench(config: BackendBenchConfig, progress: Any = print) -> dict[str, Any]:
    """Run every concurrency level against a fresh pinned backend; returns the results."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = rollstream_command("backend", "--port", str(port), "--policy", config.policy)
    command += ["--tpot-ms", str(config.tpot_ms), "--ttft-ms", str(config.ttft_ms)]
    pinnable = hasattr(os, "sched_setaffinity")
    levels = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "backend.log"
        async with serving(command, config.server_core, log, health=f"{base}/health") as proc:
            previous = os.sched_getaffinity(0) if pinnable else set()
            if pinnable:
                os.sched_setaffinity(0, {config.client_core})
            try:
                for n in config.concurrency:
                    level = await _level(f"{base}/v1/chat/completions", proc.pid, n, config)
                    progress(
                        f"  {n:>4} streams: {level['tokens_per_s']:>8.0f} tokens/s, "
                        f"{level['errors']} errors, TTFT p50 {level['ttft_p50_ms']} ms, "
                        f"ITL p99 {level['itl_p99_ms']} ms, "
                        f"server CPU {level['server_cpu_utilisation']:.0%}"
                    )
                    levels.append(level)
            finally:
                if pinnable:
                    os.sched_setaffinity(0, previous)
    return {"config": asdict(config), "levels": levels}


def backend_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: each concurrency level, and the targets."""
    config, levels = result["config"], result["levels"]
    best = max(levels, key=lambda level: level["tokens_per_s"])
    clean = max((level["concurrency"] for level in levels if level["errors"] == 0), default=0)
    rows = [
        (
            lv["concurrency"],
            f"{lv['tokens_per_s']:.0f}",
            lv["errors"],
            f"{lv['ttft_p50_ms']} / {lv['ttft_p99_ms']}",
            f"{lv['itl_p50_ms']} / {lv['itl_p99_ms']}",
            lv["server_cpu_us_per_token"],
            f"{lv['server_cpu_utilisation']:.0%}",
            lv["server_rss_mb"],
        )
        for lv in levels
    ]
    header = ["streams", "tokens/s", "errors", "TTFT p50 / p99 (ms)"]
    header += ["inter-token p50 / p99 (ms)", "server CPU µs/token", "server CPU", "RSS MB"]
    met_rate = best["tokens_per_s"] >= TARGETS["tokens_per_s"]
    return [
        "## Reference backend (`rollstream bench backend`)",
        "",
        f"Server pinned to one core, {config['policy']} policy, {config['max_tokens']} tokens "
        f"per stream, latency model {config['ttft_ms']} ms TTFT + {config['tpot_ms']} ms per "
        "token; load generator on the other core.",
        "",
        *table(header, "rrrllrrr", rows),
        "",
        f"- Target ≥ {TARGETS['tokens_per_s']} streamed tokens/s: "
        f"{'met' if met_rate else 'MISSED'} ({best['tokens_per_s']:.0f} at "
        f"{best['concurrency']} streams).",
        f"- Target ≥ {TARGETS['concurrent_streams']} concurrent streams without errors: "
        f"{'met' if clean >= TARGETS['concurrent_streams'] else 'MISSED'} "
        f"(largest clean level: {clean}).",
        "",
    ]
