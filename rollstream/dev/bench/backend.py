"""``rollstream bench backend``: streamed tokens per second and concurrent streams on one core.

The backend runs in its own process pinned to one core; the load generator runs on another
and opens N concurrent streaming chat requests (``ignore_eos``, fixed ``max_tokens``, the
latency model pacing each stream). Measured: tokens/s delivered, errors, time to first token
and inter-token gaps as the client sees them, and the backend's CPU time per token.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
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
from rollstream.host import free_port


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


@dataclass(frozen=True)
class LevelResult:
    """The figures of one concurrency level."""

    concurrency: int
    streams_ok: int
    errors: int
    tokens: int
    seconds: float
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    server_cpu_s: float
    server_cpu_us_per_token: float
    server_cpu_utilisation: float
    server_rss_mb: float


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
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
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


async def _level(url: str, pid: int, n: int, config: BackendBenchConfig) -> LevelResult:
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
    return LevelResult(
        concurrency=n,
        streams_ok=sum(1 for r in ok if r[0] == config.max_tokens),
        errors=len(results) - len(ok) + sum(1 for r in ok if r[0] != config.max_tokens),
        tokens=tokens,
        seconds=round(seconds, 3),
        tokens_per_s=round(tokens / seconds, 1),
        ttft_p50_ms=round(percentile(ttfts, 50), 1),
        ttft_p99_ms=round(percentile(ttfts, 99), 1),
        itl_p50_ms=round(percentile(gaps, 50), 2),
        itl_p99_ms=round(percentile(gaps, 99), 2),
        server_cpu_s=round(cpu, 3),
        server_cpu_us_per_token=round(cpu / max(tokens, 1) * 1e6, 1),
        server_cpu_utilisation=round(cpu / seconds, 3),
        server_rss_mb=round(process_rss_mb(pid), 1),
    )


async def run_backend_bench(config: BackendBenchConfig, progress: Any = print) -> dict[str, Any]:
    """Run every concurrency level against a fresh pinned backend; returns the results."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "rollstream",
        "--log-level",
        "WARNING",
        "backend",
        "--port",
        str(port),
        "--policy",
        config.policy,
        "--tpot-ms",
        str(config.tpot_ms),
        "--ttft-ms",
        str(config.ttft_ms),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        proc = spawn_pinned(cmd, config.server_core, Path(tmp) / "backend.log")
        pinnable = hasattr(os, "sched_setaffinity")
        previous = os.sched_getaffinity(0) if pinnable else set()
        if pinnable:
            os.sched_setaffinity(0, {config.client_core})
        try:
            base = f"http://127.0.0.1:{port}"
            await wait_healthy(f"{base}/health")
            levels = []
            for n in config.concurrency:
                result = await _level(f"{base}/v1/chat/completions", proc.pid, n, config)
                progress(
                    f"  {n:>4} streams: {result.tokens_per_s:>8.0f} tokens/s, "
                    f"{result.errors} errors, TTFT p50 {result.ttft_p50_ms} ms, "
                    f"ITL p99 {result.itl_p99_ms} ms, "
                    f"server CPU {result.server_cpu_utilisation:.0%}"
                )
                levels.append(asdict(result))
        finally:
            if pinnable:
                os.sched_setaffinity(0, previous)
            proc.terminate()
            proc.wait(timeout=10)
    return {"config": asdict(config), "levels": levels}
