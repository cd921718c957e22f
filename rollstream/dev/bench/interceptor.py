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
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from itertools import cycle, islice
from pathlib import Path
from typing import Any, Literal

import aiohttp

from rollstream.dev.bench.backend import rollstream_command, round_ratios, serving
from rollstream.dev.bench.call_costs import measure_call_costs, upstream_chunks
from rollstream.dev.bench.common import (
    cpu_ns_between,
    percentile,
    process_cpu_seconds,
    process_rss_mb,
    thread_cpu_ns,
)
from rollstream.dev.bench.engine_upstream import vllm_upstream
from rollstream.dev.bench.runner import Sample, median_of, run_rounds, table
from rollstream.dev.bench.summary import INTERCEPTOR_CPU_TARGET
from rollstream.host import free_port

MODES = ("direct", "mitmproxy", "rollstream")
#: What a first token may be in a chunk's delta: a thinking model's first tokens are reasoning.
Env = dict[str, str]
_FIRST_TOKEN = ("content", "reasoning", "reasoning_content", "tool_calls")
_SENTENCE = "the polar bear walks across the ice and looks for seals near the open water"


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


def _body(content: str, model: str, max_tokens: int = 16) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }


def _long_prompt(words: int) -> str:
    # The run calibrates the word count to the target token count with the served tokenizer.
    return " ".join(islice(cycle(_SENTENCE.split()), words))


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
                for choice in json.loads(line[6:]).get("choices") or []:
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
    """TTFTs (ms) and errors of ``config.streams`` streams of calls in a row, side by side.

    Each starts at a random point within one call's duration, so arrivals are spread as in a
    steady state (a burst measures the queue, not the added latency); each stream's first
    call opens its connection and is not counted.
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
) -> Sample:
    """One path's figures: proxy CPU over the long calls, then the steady streams' TTFTs."""
    url = f"{base}/v1/chat/completions"
    long_body = _body(_long_prompt(words), config.model)
    short_body = _body("Tell me about polar bears.", config.model, config.stream_tokens)
    connector, timeout = aiohttp.TCPConnector(limit=0), aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
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
        ttfts, stream_errors = await _steady_streams(session, url, short_body, config, mode)
    return {
        "calls": config.calls,
        "errors": sum(1 for r in results if isinstance(r, BaseException)) + stream_errors,
        "proxy_cpu_ms_per_call": round(cpu / config.calls * 1000, 2),
        "call_latency_p50_ms": round(percentile(latencies, 50), 1),
        "ttft_p50_ms": round(percentile(ttfts, 50), 1),
        "ttft_p99_ms": round(percentile(ttfts, 99), 1),
        "proxy_rss_mb": round(process_rss_mb(pid), 1) if pid else 0.0,
        "proxy_idle_cpu_ms_per_s": 0.0,
    }


async def _count_tokens(upstream: str, words: int, model: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": _long_prompt(words)}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{upstream}/tokenize", json=body) as response,
    ):
        return int((await response.json())["count"])


def _proxy_command(mode: str, port: int, upstream: str) -> list[str]:
    if mode == "rollstream":
        args = f"interceptor --port {port} --upstream {upstream} --admin-port 0"
        return rollstream_command(*args.split())
    mitmdump = shutil.which("mitmdump", path=str(Path(sys.executable).parent))
    if mitmdump is None:
        raise RuntimeError("mitmdump not found beside this Python")
    # Streaming on, as rollstream does it: without it mitmproxy buffers whole answers.
    args = f"-q --listen-host 127.0.0.1 -p {port} --mode reverse:{upstream}"
    return [mitmdump, *args.split(), "--set", "stream_large_bodies=1"]


async def _idle_cpu_ms_per_s(pid: int, seconds: float) -> float:
    """The proxy's CPU per second while no call arrives: its timers and background clients.

    Measured after the load, with every client (the Kafka producer starts with the first
    record) running. A proxy that wakes up often costs CPU on every call too.
    """
    await asyncio.sleep(min(1.0, seconds))  # the last answers and records leave
    before = thread_cpu_ns(pid)
    await asyncio.sleep(seconds)
    return round(cpu_ns_between(before, thread_cpu_ns(pid)) / seconds / 1e6, 3)


async def _run_mode(
    mode: str, upstream: str, config: InterceptorBenchConfig, words: int, tmp: Path, env: Env
) -> Sample:
    if mode == "direct":
        return await _measure(upstream, None, config, mode, words)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = _proxy_command(mode, port, upstream)
    log = tmp / f"{mode}.log"
    async with serving(command, config.proxy_core, log, env, f"{base}/health") as proxy:
        result = await _measure(base, proxy.pid, config, mode, words)
        result["proxy_idle_cpu_ms_per_s"] = await _idle_cpu_ms_per_s(proxy.pid, config.idle_s)
        return result


def _median_result(mode: str, runs: Sequence[Sample]) -> dict[str, Any]:
    """Each figure's median over the rounds (errors summed, RSS the largest)."""
    figures = ("proxy_cpu_ms_per_call", "call_latency_p50_ms", "ttft_p50_ms", "ttft_p99_ms")
    return {
        "mode": mode,
        "rounds": len(runs),
        **{name: median_of(runs, name) for name in figures},
        "proxy_idle_cpu_ms_per_s": median_of(runs, "proxy_idle_cpu_ms_per_s", 3),
        "calls": sum(r["calls"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
        "proxy_rss_mb": max(r["proxy_rss_mb"] for r in runs),
    }


@asynccontextmanager
async def _upstream(
    config: InterceptorBenchConfig, tmp: Path, env: dict[str, str], given: str | None
) -> AsyncIterator[str]:
    """The upstream every path reaches, serving config.model, healthy: its URL."""
    port = free_port()
    if given is not None:  # already running (a test's shared vLLM)
        yield given
    elif config.engine == "vllm":
        async with vllm_upstream("qwen3", config.model, port) as server:
            yield server.url
    else:
        base = f"http://127.0.0.1:{port}"
        command = rollstream_command("backend", "--port", str(port))
        command += ["--tpot-ms", str(config.tpot_ms), "--ttft-ms", str(config.ttft_ms)]
        log = tmp / "backend.log"
        async with serving(command, config.backend_core, log, env, f"{base}/health"):
            yield base


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
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": topic_prefix,
    }
    with tempfile.TemporaryDirectory() as tmp:
        env["ROLLSTREAM_STATE_DIR"] = tmp
        async with _upstream(config, Path(tmp), env, upstream) as url:
            first = await _count_tokens(url, config.prompt_tokens, config.model)
            words = max(1, round(config.prompt_tokens * config.prompt_tokens / first))
            prompt_tokens = await _count_tokens(url, words, config.model)
            long_body = _body(_long_prompt(words), config.model)
            costs = measure_call_costs(
                json.dumps(long_body).encode(), await upstream_chunks(url, long_body)
            )
            progress(f"  rollstream's own work per call (ms): {costs}")

            async def measure(mode: str, _: int) -> Sample:
                return await _run_mode(mode, url, config, words, Path(tmp), env)

            samples = await run_rounds(
                MODES,
                config.rounds,
                measure,
                progress,
                lambda r: (
                    f"CPU {r['proxy_cpu_ms_per_call']:>7} ms/call, TTFT p50 {r['ttft_p50_ms']} "
                    f"ms, p99 {r['ttft_p99_ms']} ms, {r['errors']} errors"
                ),
            )
    # The ratio is taken per round and its median reported.
    ratio, ratio_range = round_ratios(
        samples["rollstream"], samples["mitmproxy"], "proxy_cpu_ms_per_call"
    )
    modes = [_median_result(mode, samples[mode]) for mode in MODES]
    return {
        "config": asdict(config),
        "order": "abba",
        "engine": config.engine,
        "prompt_tokens_measured": prompt_tokens,
        "modes": modes,
        "cpu_ratio_vs_mitmproxy": ratio,
        "cpu_ratio_range": ratio_range,
        "own_work_ms_per_call": costs,
        "added_ttft_p50_ms": round(modes[2]["ttft_p50_ms"] - modes[0]["ttft_p50_ms"], 1),
    }


def interceptor_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: the three paths, the targets and the profile of our share."""
    config = result["config"]
    on_vllm = result.get("engine") == "vllm"
    latency = (
        "upstream: a real vLLM serving qwen3's tiny model on the CPU build, its own latency "
        "(not pinned: its threads share the proxy's core)"
        if on_vllm
        else f"backend latency {config['ttft_ms']} ms + {config['tpot_ms']} ms/token"
    )
    # Results from before the rounds alternated their order (no "order") ran each round in
    # the same order; the section says which.
    order = (
        "alternating the paths' order (ABBA)"
        if result.get("order") == "abba"
        else "each measuring the paths in the same order"
    )
    rows = [
        (
            m["mode"],
            m["proxy_cpu_ms_per_call"],
            "-" if m.get("proxy_idle_cpu_ms_per_s") is None else m["proxy_idle_cpu_ms_per_s"],
            m["call_latency_p50_ms"],
            f"{m['ttft_p50_ms']} / {m['ttft_p99_ms']}",
            m["errors"],
            m["proxy_rss_mb"],
        )
        for m in result["modes"]
    ]
    header = ["path", "proxy CPU ms/call", "proxy CPU idle (ms/s)", "call p50 (ms)"]
    header += ["TTFT p50 / p99 (ms)", "errors", "proxy RSS MB"]
    ratio, added = result["cpu_ratio_vs_mitmproxy"], result["added_ttft_p50_ms"]
    rounds = config.get("rounds", 1)
    lines = [
        "## Interceptor in front of vLLM (`rollstream bench interceptor --engine vllm`)"
        if on_vllm
        else "## Interceptor (`rollstream bench interceptor`)",
        "",
        f"Same upstream reached three ways, one run, {rounds} rounds {order} "
        f"(figures: medians over the rounds). CPU per call: the proxy process's CPU time "
        f"(pinned to its own core) over {config['calls']} streamed chat calls with a "
        f"{result['prompt_tokens_measured']}-token prompt and 16 output tokens, "
        f"{config['call_concurrency']} at a time. TTFT: {config['streams']} concurrent streams, "
        f"{config.get('stream_rounds', 1)} calls each in a row, starts spread over one call's "
        f"duration (steady state; each stream's first call, which opens its connection, not "
        f"counted); {latency}.",
        "",
        *table(header, "lrrrlrr", rows),
        "",
        f"- Target CPU per call ≤ {INTERCEPTOR_CPU_TARGET} x plain mitmproxy: "
        f"{'met' if ratio is not None and ratio <= INTERCEPTOR_CPU_TARGET else 'MISSED'} "
        f"(median {ratio} x over {rounds} rounds; range "
        f"{' to '.join(str(r) for r in result.get('cpu_ratio_range') or [ratio])} x).",
        f"- Target added TTFT p50 ≤ 10 ms over direct: "
        f"{'met' if added <= 10 else 'MISSED'} ({added} ms).",
        "",
    ]
    costs = result.get("own_work_ms_per_call")
    if costs:
        steps = ", ".join(f"{k} {v}" for k, v in costs.items() if k != "total")
        by_mode = {m["mode"]: m["proxy_cpu_ms_per_call"] for m in result["modes"]}
        extra = by_mode["rollstream"] - by_mode["mitmproxy"]
        lines += [
            f"Profile of rollstream's share ({extra:.2f} ms/call more than plain mitmproxy): its "
            f"pure steps, run in-process on the bytes the backend streamed for this call, take "
            f"{costs['total']} ms ({steps}; ms). `stream` is mostly the first chunk, which "
            f"carries the prompt's token ids; `record` packs ids and delta-encodes and "
            f"compresses the requests. Inside the proxy the same steps cost about twice to five "
            f"times as much as in this tight loop (each read runs after mitmproxy's own code "
            f"has taken the caches), and the Kafka producer works in the same process. Idle "
            f"CPU: the proxy's while no call arrives, over {config.get('idle_s', 0)} s after "
            f"each load (timers and background Kafka clients; a proxy that wakes often pays "
            f"for it on every call too).",
            "",
        ]
    return lines
