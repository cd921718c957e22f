"""``rollstream bench stream``: long streamed answers through plain mitmproxy and rollstream.

The reference backend streams 1,000-token answers as fast as it can (scripted policy, no
latency model). Load processes (``stream_load``) run a few sessions, each its own key and
connection, making streamed calls in a row for a fixed duration through each path of
:data:`PATHS` in turn, rounds alternating the order. Measured per path: streamed tokens/s and
the CPU time of every proxy process, the backend, the load and the whole machine, so the report
can say which of them bounds the run; rollstream's records in the broker are counted at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from rollstream.dev.bench.common import process_cpu_seconds, spawn_pinned, wait_healthy
from rollstream.dev.bench.runner import run_rounds
from rollstream.dev.bench.scale import (
    bench_env,
    count_records,
    load_processes,
    rollstream_command,
    run_queue_wait_seconds,
)
from rollstream.dev.bench.stream_load import StreamLoadResult, StreamLoadSpec, stream_answer
from rollstream.dev.bench.stream_report import ModeRun, mode_run, summarise
from rollstream.host import free_port
from rollstream.settings import KafkaSettings

#: The paths, in the order of the first round: (name, workers; 0: plain mitmproxy, router?).
PATHS: dict[str, tuple[int, bool]] = {
    "mitmproxy": (0, False),
    "rollstream-1w": (1, False),
    "rollstream-2w": (2, False),
    "rollstream-2w-router": (2, True),
}


@dataclass(frozen=True)
class StreamBenchConfig:
    """The sizes of one run."""

    max_tokens: int = 1000
    sessions: int = 4
    duration_s: float = 20.0
    rounds: int = 3
    router: bool = True
    clients: int = 1
    read_batch_ms: float = 2.0
    start_delay_s: float = 3.0

    @property
    def paths(self) -> list[str]:
        """The paths measured, in the first round's order."""
        return [p for p in PATHS if self.router or not PATHS[p][1]]


_WORDS = ("the", "polar", "bear", "walks", "across", "the", "ice", "and", "looks", "for", "seals")

#: A run small enough for the tests (a few seconds a path).
SMALL = StreamBenchConfig(max_tokens=200, sessions=2, duration_s=1.5, rounds=1, router=False)


def request_body(config: StreamBenchConfig, plain: bool) -> dict[str, Any]:
    """A streamed call whose answer runs to ``max_tokens`` (``plain``: for plain mitmproxy)."""
    body: dict[str, Any] = {
        "model": "rollstream-tiny",
        "messages": [{"role": "user", "content": "Tell me all about polar bears."}],
        "max_tokens": config.max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    if plain:
        # What rollstream adds on the way upstream, so the backend streams the same chunks
        # (token ids, logprobs, usage) whichever proxy asks: its work is the same on every path.
        body |= {
            "return_token_ids": True,
            "logprobs": True,
            "top_logprobs": 0,
            "stream_options": {"include_usage": True},
        }
    return body


def scenario_file(path: Path, tokens: int) -> Path:
    """A scripted-policy scenario file whose answer to a call without tools is long enough.

    Every word is at least one token, so ``tokens`` words outlast ``max_tokens``; the answer
    is then cut at ``max_tokens`` as real text, not padded with end-of-turn tokens.
    """
    text = " ".join(_WORDS[i % len(_WORDS)] for i in range(tokens + 16))
    scenario = {"name": "long", "turns": [{"text": "ok"}]}
    path.write_text(json.dumps({"scenarios": [scenario], "side_call_text": text}))  # YAML too
    return path


def proxy_command(path: str, port: int, admin_port: int, upstream: str) -> list[str]:
    """The command of a path's proxy (one of :data:`PATHS`) listening on ``port``."""
    workers, _ = PATHS[path]
    if workers == 0:
        mitmdump = shutil.which("mitmdump", path=str(Path(sys.executable).parent))
        if mitmdump is None:
            raise RuntimeError("mitmdump not found beside this Python")
        # Streaming on, as rollstream has it: without it mitmproxy buffers whole answers.
        return [
            mitmdump, "-q", "--listen-host", "127.0.0.1", "-p", str(port),
            "--mode", f"reverse:{upstream}", "--set", "stream_large_bodies=1",
        ]  # fmt: skip
    return rollstream_command(
        "interceptor",
        *("--port", str(port), "--admin-port", str(admin_port)),
        *("--upstream", upstream, "--workers", str(workers)),
    )


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (/proc/stat; idle and iowait out)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is already counted in user time
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


async def _get_json(http: aiohttp.ClientSession, method: str, url: str) -> dict[str, Any]:
    async with http.request(method, url, json={}) as reply:
        body = await reply.json(content_type=None)
        if reply.status >= 400 or not isinstance(body, dict):
            raise RuntimeError(f"{method} {url}: HTTP {reply.status}: {body}")
        return body


async def _sessions(
    http: aiohttp.ClientSession, path: str, keys: list[str], base: str, admin: str
) -> tuple[list[str], list[int]]:
    """Each session's URL (its worker's, registered as the node does) and the workers' pids."""
    workers, router = PATHS[path]
    if workers == 0:
        return [base] * len(keys), []
    urls = []
    for key in keys:
        reply = await _get_json(http, "PUT", f"{admin}/sessions/{key}")
        urls.append(base if router else str(reply.get("url") or base))
    health = await _get_json(http, "GET", f"{admin}/health")
    pids = [int(w["pid"]) for w in health.get("workers", []) if w.get("pid")]
    return urls, pids


async def start_load(
    config: StreamBenchConfig,
    keys: list[str],
    urls: list[str],
    body: dict[str, Any],
    tmp: Path,
    env: dict[str, str],
) -> asyncio.Task[list[StreamLoadResult]]:
    """Start the load processes, each with its share of the sessions; return at their start."""
    start_at = time.time() + config.start_delay_s
    spec = StreamLoadSpec(
        keys=keys, urls=urls, body=body, start_at=start_at,
        duration_s=config.duration_s, read_batch_ms=config.read_batch_ms,
    )  # fmt: skip
    shares = [
        asdict(spec) | {"keys": keys[i :: config.clients], "urls": urls[i :: config.clients]}
        for i in range(config.clients)
    ]
    module = "rollstream.dev.bench.stream_load"

    async def run() -> list[StreamLoadResult]:
        return [StreamLoadResult(**r) for r in await load_processes(module, shares, tmp, env)]

    load = asyncio.create_task(run())
    await asyncio.sleep(max(0.0, start_at - time.time()))
    return load


def _cpu(pids: list[int]) -> dict[int, float]:
    return {pid: process_cpu_seconds(pid) for pid in pids}


def _waits(pids: list[int]) -> float:
    return sum(run_queue_wait_seconds(pid) for pid in pids)


def loop_wakeups(pid: int) -> int:
    """Voluntary context switches of a process's main thread (its event loop going idle)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


async def _run_path(
    path: str,
    round_: int,
    config: StreamBenchConfig,
    backend: subprocess.Popen[bytes],
    upstream: str,
    key_prefix: str,
    tmp: Path,
    env: dict[str, str],
) -> tuple[ModeRun, int]:
    """One path once: start its proxy, warm it up, run the load; the run and its warm-up calls."""
    port, admin_port = free_port(), free_port()
    base, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    work = tmp / f"{path}-{round_}"
    work.mkdir()
    proxy_env = env | {"ROLLSTREAM_STATE_DIR": str(work)}
    command = proxy_command(path, port, admin_port, upstream)
    proxy = spawn_pinned(command, None, work / "proxy.log", proxy_env)
    plain = PATHS[path][0] == 0
    body = request_body(config, plain)
    keys = [f"{key_prefix}{path}-r{round_}-s{i}" for i in range(config.sessions)]
    try:
        try:
            await wait_healthy(f"{base if plain else admin}/health")
        except RuntimeError as exc:
            tail = (work / "proxy.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{path}: {exc}; its log ends:\n{tail}") from exc
        async with aiohttp.ClientSession() as http:
            urls, worker_pids = await _sessions(http, path, keys, base, admin)
            # Warm-up: a call per session through its URL (imports, caches, the producer).
            await asyncio.gather(
                *(
                    stream_answer(http, f"{url}/v1/chat/completions", body, key)
                    for url, key in zip(urls, keys, strict=True)
                )
            )
        load = await start_load(config, keys, urls, body, work, env)
        pids = [proxy.pid, *worker_pids]
        wakeups = sum(loop_wakeups(pid) for pid in pids)
        waits = _waits(pids), run_queue_wait_seconds(backend.pid)
        before = _cpu([*pids, backend.pid]), machine_busy_seconds(), time.monotonic()
        results = await load
        after = _cpu([*pids, backend.pid]), machine_busy_seconds(), time.monotonic()
        wakeups = sum(loop_wakeups(pid) for pid in pids) - wakeups
        waits = _waits(pids) - waits[0], run_queue_wait_seconds(backend.pid) - waits[1]
    finally:
        proxy.terminate()  # a clean stop flushes rollstream's publisher
        try:
            proxy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()
    used = {pid: after[0][pid] - before[0][pid] for pid in before[0]}
    run = mode_run(
        path,
        round_,
        config.max_tokens,
        [tuple(c) for r in results for c in r.calls],  # type: ignore[misc]
        proxy_cpu_s=[used[pid] for pid in pids],
        backend_cpu_s=used[backend.pid],
        load_cpu_s=sum(r.cpu_s for r in results),
        machine_busy_s=after[1] - before[1],
        window_s=after[2] - before[2],
        proxy_wakeups=wakeups,
        proxy_wait_s=waits[0],
        backend_wait_s=waits[1],
    )
    return run, len(keys)


async def start_backend(
    config: StreamBenchConfig, port: int, tmp: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """The reference backend streaming long answers without a latency model, warmed up."""
    scenarios = scenario_file(tmp / "scenarios.json", config.max_tokens)
    command = rollstream_command(
        "backend",
        *("--port", str(port), "--policy", "scripted", "--scenarios", str(scenarios)),
        *("--ttft-ms", "0", "--tpot-ms", "0"),
    )
    backend = spawn_pinned(command, None, tmp / "backend.log", env)
    try:
        await wait_healthy(f"http://127.0.0.1:{port}/health")
        async with aiohttp.ClientSession() as http:  # its own first call: imports, caches
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            await stream_answer(http, url, request_body(config, True), "warm-up")
    except BaseException:
        backend.terminate()
        backend.wait(timeout=30)
        raise
    return backend


async def run_stream_bench(
    config: StreamBenchConfig, kafka: KafkaSettings, progress: Callable[[str], Any] = print
) -> dict[str, Any]:
    """Run every path ``config.rounds`` times against one backend; the topics must exist."""
    key_prefix = f"stream-{os.getpid()}-{int(time.time())}-"
    backend_port = free_port()
    upstream = f"http://127.0.0.1:{backend_port}"
    runs: list[ModeRun] = []
    captured = 0  # calls through rollstream, each of which should be one record
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp, env = Path(tmp_name), bench_env(kafka, tmp_name)
        backend = await start_backend(config, backend_port, tmp, env)

        async def measure(path: str, round_: int) -> dict[str, float]:
            nonlocal captured
            run, warm = await _run_path(
                path, round_, config, backend, upstream, key_prefix, tmp, env
            )
            runs.append(run)
            if path != "mitmproxy":
                captured += warm + run.calls_ok
            progress(
                f"  round {round_ + 1} {path:<21} {run.tokens_per_s:>8,.0f} tokens/s, "
                f"proxy {run.proxy_cpu_us_per_token} µs/token, proxy "
                f"{run.proxy_cores} cores, backend {run.backend_cores}, load "
                f"{run.load_cores}, machine {run.machine_busy_cores}, {run.errors} errors"
            )
            return {}

        try:
            await run_rounds(config.paths, config.rounds, measure)
        finally:
            backend.terminate()
            backend.wait(timeout=30)
    records = await count_records(kafka, key_prefix)
    cores = os.cpu_count() or 1
    result = summarise(runs, config.paths, cores) | {"config": asdict(config), "cores": cores}
    result["kafka"] = records | {"calls_through_rollstream": captured}
    return result
