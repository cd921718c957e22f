"""``rollstream bench interceptor``: direct vs plain mitmproxy vs rollstream, side by side.

One run, three ways to reach the same upstream: directly, through ``mitmdump`` in reverse mode
with no addon, and through ``rollstream interceptor`` (capturing and publishing to a real
broker). The proxy runs pinned to its own core; its CPU time per call is read from /proc, so
the ratio to plain mitmproxy does not depend on how busy the machine is. Time to first token is
measured by the client, with the reference backend's latency model on, or against a real vLLM
(``engine="vllm"``: qwen3's tiny model on the CPU build, its own latency).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp

from rollstream.dev.bench.call_costs import measure_call_costs, upstream_chunks
from rollstream.dev.bench.common import (
    abba,
    cpu_ns_between,
    percentile,
    process_cpu_seconds,
    process_rss_mb,
    spawn_pinned,
    thread_cpu_ns,
    wait_healthy,
)
from rollstream.dev.bench.engine_upstream import vllm_upstream
from rollstream.host import free_port

MODES = ("direct", "mitmproxy", "rollstream")
#: What a first token may be in a chunk's delta: a thinking model's first tokens are reasoning.
_FIRST_TOKEN = ("content", "reasoning", "reasoning_content", "tool_calls")


@dataclass(frozen=True)
class InterceptorBenchConfig:
    """The sizes of one run."""

    prompt_tokens: int = 8000
    calls: int = 120
    call_concurrency: int = 4
    streams: int = 32
    stream_rounds: int = 4
    rounds: int = 5
    idle_s: float = 5.0
    stream_tokens: int = 50
    tpot_ms: float = 20.0
    ttft_ms: float = 50.0
    backend_core: int = 0
    proxy_core: int = 1
    #: The upstream: the reference backend (pinned, with the latency model above) or a real vLLM
    #: serving qwen3's tiny model (its own latency; not pinned: its threads use every core).
    engine: Literal["reference", "vllm"] = "reference"
    #: The model name every call asks for (the upstream serves it under this name).
    model: str = "rollstream-tiny"


#: The sizes of a run against vLLM (a tiny model on the CPU build, about a second an 8k call).
VLLM_SIZES = InterceptorBenchConfig(
    prompt_tokens=2000, calls=24, streams=8, stream_rounds=3, rounds=3, engine="vllm"
)


@dataclass(frozen=True)
class ModeResult:
    """The figures of one way to reach the backend."""

    mode: str
    calls: int
    errors: int
    proxy_cpu_ms_per_call: float
    call_latency_p50_ms: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    proxy_rss_mb: float
    proxy_idle_cpu_ms_per_s: float = 0.0


def _long_prompt(words_count: int) -> str:
    # The run calibrates the word count to the target token count with the served tokenizer.
    words = [
        "the",
        "polar",
        "bear",
        "walks",
        "across",
        "the",
        "ice",
        "and",
        "looks",
        "for",
        "seals",
        "near",
        "the",
        "open",
        "water",
    ]
    return " ".join(words[i % len(words)] for i in range(words_count))


def _long_body(words: int, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": _long_prompt(words)}],
        "max_tokens": 16,
        "stream": True,
        "ignore_eos": True,
    }


async def _stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], key: str
) -> tuple[float, float]:
    """One streamed call: (time to its first token, total seconds)."""
    began = time.perf_counter()
    first = float("nan")
    async with session.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        async for raw in resp.content:
            line = raw.strip()
            if first != first and line.startswith(b"data: {"):  # NaN: nothing seen yet
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if any(delta.get(key) for key in _FIRST_TOKEN):
                        first = time.perf_counter() - began
    return first, time.perf_counter() - began


async def _steady_streams(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    config: InterceptorBenchConfig,
    mode: str,
) -> tuple[list[float], int]:
    """TTFTs (ms) of ``config.streams`` streams running side by side, as agents do.

    Each stream makes ``config.stream_rounds`` calls one after another, starting at a random
    point within one call's duration, so arrivals are spread as in a steady state rather than
    all landing in the same millisecond (a burst measures the queue, not the added latency).
    The first call of each stream opens its connection and is not counted.
    """
    period_s = (config.ttft_ms + config.stream_tokens * config.tpot_ms) / 1000
    rng = random.Random(0)
    offsets = [rng.uniform(0, period_s) for _ in range(config.streams)]

    async def one_stream(i: int) -> list[float]:
        await asyncio.sleep(offsets[i])
        out = []
        for round_ in range(config.stream_rounds):
            first, _ = await _stream(session, url, body, f"ttft-{mode}-{i}")
            if round_:
                out.append(first * 1000)
        return out

    results = await asyncio.gather(
        *(one_stream(i) for i in range(config.streams)), return_exceptions=True
    )
    ttfts = [t for r in results if isinstance(r, list) for t in r]
    return ttfts, sum(1 for r in results if isinstance(r, BaseException))


async def _measure(
    base: str, pid: int | None, config: InterceptorBenchConfig, mode: str, words: int
) -> ModeResult:
    url = f"{base}/v1/chat/completions"
    long_body = _long_body(words, config.model)
    short_body = {
        "model": config.model,
        "messages": [{"role": "user", "content": "Tell me about polar bears."}],
        "max_tokens": config.stream_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    errors = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:
        for i in range(3):  # warm-up
            await _stream(session, url, long_body, f"warm-{mode}-{i}")
        semaphore = asyncio.Semaphore(config.call_concurrency)

        async def one_call(i: int) -> float:
            async with semaphore:
                return (await _stream(session, url, long_body, f"cpu-{mode}-{i}"))[1]

        cpu_before = process_cpu_seconds(pid) if pid else 0.0
        results = await asyncio.gather(
            *(one_call(i) for i in range(config.calls)), return_exceptions=True
        )
        cpu = (process_cpu_seconds(pid) - cpu_before) if pid else 0.0
        latencies = [r * 1000 for r in results if isinstance(r, float)]
        errors += sum(1 for r in results if isinstance(r, BaseException))
        ttfts, stream_errors = await _steady_streams(session, url, short_body, config, mode)
        errors += stream_errors
    return ModeResult(
        mode=mode,
        calls=config.calls,
        errors=errors,
        proxy_cpu_ms_per_call=round(cpu / config.calls * 1000, 2),
        call_latency_p50_ms=round(percentile(latencies, 50), 1),
        ttft_p50_ms=round(percentile(ttfts, 50), 1),
        ttft_p99_ms=round(percentile(ttfts, 99), 1),
        proxy_rss_mb=round(process_rss_mb(pid), 1) if pid else 0.0,
    )


async def _count_tokens(upstream: str, words: int, model: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": _long_prompt(words)}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{upstream}/tokenize", json=body) as response,
    ):
        count: int = (await response.json())["count"]
    return count


def _proxy_command(mode: str, port: int, upstream: str) -> list[str]:
    if mode == "mitmproxy":
        mitmdump = shutil.which("mitmdump", path=str(Path(sys.executable).parent))
        if mitmdump is None:
            raise RuntimeError("mitmdump not found beside this Python")
        # Streaming on, as rollstream does it: without it mitmproxy buffers whole answers.
        return [
            mitmdump,
            "-q",
            "--listen-host",
            "127.0.0.1",
            "-p",
            str(port),
            "--mode",
            f"reverse:{upstream}",
            "--set",
            "stream_large_bodies=1",
        ]
    return [
        sys.executable,
        "-m",
        "rollstream",
        "--log-level",
        "WARNING",
        "interceptor",
        "--port",
        str(port),
        "--upstream",
        upstream,
        "--admin-port",
        "0",
    ]


async def _run_mode(
    mode: str,
    upstream: str,
    config: InterceptorBenchConfig,
    words: int,
    tmp: Path,
    env: dict[str, str],
) -> ModeResult:
    if mode == "direct":
        return await _measure(upstream, None, config, mode, words)
    port = free_port()
    proxy = spawn_pinned(
        _proxy_command(mode, port, upstream), config.proxy_core, tmp / f"{mode}.log", env
    )
    try:
        await wait_healthy(f"http://127.0.0.1:{port}/health")
        result = await _measure(f"http://127.0.0.1:{port}", proxy.pid, config, mode, words)
        idle = await _idle_cpu_ms_per_s(proxy.pid, config.idle_s)
        return replace(result, proxy_idle_cpu_ms_per_s=idle)
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)


async def _idle_cpu_ms_per_s(pid: int, seconds: float) -> float:
    """The proxy's CPU while no call arrives: its timers and background clients, per second.

    Measured after the load, with every client (the Kafka producer starts with the first
    record) running. A proxy that wakes up often to look at something costs CPU on every
    call too.
    """
    await asyncio.sleep(min(1.0, seconds))  # the last answers and records leave
    before = thread_cpu_ns(pid)
    await asyncio.sleep(seconds)
    return round(cpu_ns_between(before, thread_cpu_ns(pid)) / seconds / 1e6, 3)


def _median_result(results: list[ModeResult]) -> dict[str, Any]:
    """Each figure's median over the rounds (errors summed, RSS the largest)."""
    out: dict[str, Any] = {"mode": results[0].mode, "rounds": len(results)}
    for name in ("proxy_cpu_ms_per_call", "call_latency_p50_ms", "ttft_p50_ms", "ttft_p99_ms"):
        out[name] = round(statistics.median(getattr(r, name) for r in results), 2)
    idle = statistics.median(r.proxy_idle_cpu_ms_per_s for r in results)
    out["proxy_idle_cpu_ms_per_s"] = round(idle, 3)
    out["calls"] = sum(r.calls for r in results)
    out["errors"] = sum(r.errors for r in results)
    out["proxy_rss_mb"] = max(r.proxy_rss_mb for r in results)
    return out


@asynccontextmanager
async def _upstream(
    config: InterceptorBenchConfig, port: int, tmp: Path, env: dict[str, str], given: str | None
) -> AsyncIterator[str]:
    """The upstream every path reaches, serving config.model, healthy: its URL."""
    if given is not None:  # already running (a test's shared vLLM)
        yield given
        return
    if config.engine == "vllm":
        async with vllm_upstream("qwen3", config.model, port) as server:
            yield server.url
        return
    command = [sys.executable, "-m", "rollstream", "--log-level", "WARNING", "backend"]
    command += ["--port", str(port), "--tpot-ms", str(config.tpot_ms)]
    command += ["--ttft-ms", str(config.ttft_ms)]
    backend = spawn_pinned(command, config.backend_core, tmp / "backend.log", env)
    try:
        await wait_healthy(f"http://127.0.0.1:{port}/health")
        yield f"http://127.0.0.1:{port}"
    finally:
        backend.terminate()
        backend.wait(timeout=30)


async def run_interceptor_bench(
    config: InterceptorBenchConfig,
    bootstrap_servers: str,
    topic_prefix: str,
    progress: Any = print,
    upstream: str | None = None,
) -> dict[str, Any]:
    """Run the three modes against one upstream; returns the results.

    The upstream is config.engine's, started here, or ``upstream``'s URL (running already,
    serving config.model).
    """
    backend_port = free_port()
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": topic_prefix,
    }
    with tempfile.TemporaryDirectory() as tmp:
        env["ROLLSTREAM_STATE_DIR"] = tmp
        async with _upstream(config, backend_port, Path(tmp), env, upstream) as url:
            first = await _count_tokens(url, config.prompt_tokens, config.model)
            words = max(1, round(config.prompt_tokens * config.prompt_tokens / first))
            prompt_tokens = await _count_tokens(url, words, config.model)
            long_body = _long_body(words, config.model)
            costs = measure_call_costs(
                json.dumps(long_body).encode(), await upstream_chunks(url, long_body)
            )
            progress(f"  rollstream's own work per call (ms): {costs}")
            rounds: dict[str, list[ModeResult]] = {mode: [] for mode in MODES}
            # The ratio is taken per round and its median reported.
            for round_ in range(config.rounds):
                for mode in abba(MODES, round_):
                    result = await _run_mode(mode, url, config, words, Path(tmp), env)
                    progress(
                        f"  round {round_ + 1} {mode:<10} CPU {result.proxy_cpu_ms_per_call:>7} "
                        f"ms/call, TTFT p50 {result.ttft_p50_ms} ms, p99 {result.ttft_p99_ms} "
                        f"ms, {result.errors} errors"
                    )
                    rounds[mode].append(result)
    ratios = sorted(
        ours.proxy_cpu_ms_per_call / plain.proxy_cpu_ms_per_call
        for ours, plain in zip(rounds["rollstream"], rounds["mitmproxy"], strict=True)
        if plain.proxy_cpu_ms_per_call
    )
    modes = [_median_result(rounds[mode]) for mode in MODES]
    by_mode = {m["mode"]: m for m in modes}
    return {
        "config": asdict(config),
        "order": "abba",
        "engine": config.engine,
        "prompt_tokens_measured": prompt_tokens,
        "modes": modes,
        "cpu_ratio_vs_mitmproxy": round(statistics.median(ratios), 2) if ratios else None,
        "cpu_ratio_range": [round(ratios[0], 2), round(ratios[-1], 2)] if ratios else None,
        "own_work_ms_per_call": costs,
        "added_ttft_p50_ms": round(
            by_mode["rollstream"]["ttft_p50_ms"] - by_mode["direct"]["ttft_p50_ms"], 1
        ),
    }
