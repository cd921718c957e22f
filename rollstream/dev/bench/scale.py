"""``rollstream bench scale``: many concurrent streaming sessions through one interceptor process.

One ``rollstream interceptor`` process, pinned to its own core, in front of the reference
backend (its latency model slow enough that every session's stream is open at the same time),
publishing to a real broker. Separate load processes (``scale_load``) run the sessions. Measured:
errors by kind, the interceptor's memory (sampled VmRSS and the high-water mark VmHWM), its CPU
per call and its wait for a core, open descriptors, calls/s, latencies, and the run's records
in the events topic against the calls made.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from rollstream.dev.bench.common import process_cpu_seconds, status_kb, wait_healthy
from rollstream.dev.bench.scale_load import LoadSpec, chat_body, raise_nofile, stream_call
from rollstream.dev.bench.scale_report import (
    Call,
    Sample,
    summarise_calls,
    target_verdict,
    window_usage,
)
from rollstream.host import free_port
from rollstream.kafka.clients import behind, make_consumer, topic_partitions
from rollstream.schemas import AvroSerializer, CallRecord, TopicNames
from rollstream.settings import KafkaSettings


@dataclass(frozen=True)
class ScaleBenchConfig:
    """The sizes of one run; the defaults are the issue's 1,000 sessions."""

    sessions: int = 1000
    turns: int = 3
    max_tokens: int = 24
    ttft_ms: float = 1000.0
    tpot_ms: float = 750.0
    clients: int = 1
    interceptor_core: int | None = 1
    backend_core: int | None = 0
    client_core: int | None = 0
    sample_interval_s: float = 0.25
    call_timeout_s: float = 600.0

    @property
    def call_s(self) -> float:
        """One call's duration by the latency model; session starts are spread over it."""
        return (self.ttft_ms + self.max_tokens * self.tpot_ms) / 1000


#: A run small enough for the tests (a few seconds).
SMALL = ScaleBenchConfig(sessions=50, turns=2, max_tokens=4, ttft_ms=50, tpot_ms=50)


def rollstream_command(service: str, *args: str) -> list[str]:
    """``python -m rollstream SERVICE ARGS`` with this Python, logging warnings only."""
    return [sys.executable, "-m", "rollstream", "--log-level", "WARNING", service, *args]


def bench_env(kafka: KafkaSettings, state_dir: str) -> dict[str, str]:
    """The environment with the broker, topic prefix and state directory of a run."""
    return os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
        "ROLLSTREAM_STATE_DIR": state_dir,
    }


def _pin_and_nofile(core: int | None, nofile: int) -> Callable[[], None]:
    """A preexec_fn: pin the child to ``core``, raise its open-file soft limit to ``nofile``."""

    def setup() -> None:
        if core is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {core})
        raise_nofile(nofile)

    return setup


def _spawn(
    cmd: list[str], core: int | None, nofile: int, log: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_pin_and_nofile(core, nofile),
        )


async def load_processes(
    module: str,
    specs: list[dict[str, Any]],
    tmp: Path,
    env: dict[str, str],
    preexec_fn: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """``python -m MODULE SPEC_JSON`` for every spec side by side; the JSON each one prints."""
    procs = []
    for i, spec in enumerate(specs):
        with (tmp / f"load-{i}.log").open("wb") as log:
            procs.append(
                await asyncio.create_subprocess_exec(
                    *(sys.executable, "-m", module, json.dumps(spec)),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log,
                    env=env,
                    preexec_fn=preexec_fn,
                )
            )
    results = []
    for i, proc in enumerate(procs):
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"load process {i} failed: {(tmp / f'load-{i}.log').read_text()}")
        results.append(json.loads(out))
    return results


def run_queue_wait_seconds(pid: int) -> float:
    """Time the process's threads spent runnable but waiting for a core (/proc schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended, or a kernel without schedstats
    return total / 1e9


class Sampler:
    """Polls a process's memory, CPU, run-queue wait and open descriptors until stopped."""

    def __init__(self, pid: int, interval_s: float) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.samples: list[Sample] = []
        self.fds_peak = 0

    def sample(self) -> None:
        """Take one sample now."""
        rss = status_kb(self.pid)["VmRSS"]
        cpu, wait = process_cpu_seconds(self.pid), run_queue_wait_seconds(self.pid)
        self.samples.append((time.time(), rss, cpu, wait))
        self.fds_peak = max(self.fds_peak, len(os.listdir(f"/proc/{self.pid}/fd")))

    async def run(self) -> None:
        """Sample every interval until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(self.interval_s)


async def count_records(
    kafka: KafkaSettings, key_prefix: str, timeout: float = 120
) -> dict[str, Any]:
    """Count the run's CallRecords in the events topic (session keys ``key_prefix…``).

    Returns how many, how many distinct (session, seq), and their statuses.
    """
    topic = TopicNames(kafka.topic_prefix).events
    serializer = AvroSerializer()
    consumer = make_consumer(kafka)
    await consumer.start()
    records, statuses, distinct = 0, Counter[str](), set[tuple[str, int]]()
    try:
        tps = await topic_partitions(consumer, topic)
        if not tps:
            raise RuntimeError(f"no topic {topic}")
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        async with asyncio.timeout(timeout):
            while await behind(consumer, end):
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    for message in messages:
                        record = serializer.decode(message.value or b"")
                        if isinstance(record, CallRecord) and record.session_id.startswith(
                            key_prefix
                        ):
                            records += 1
                            statuses[record.status.value] += 1
                            distinct.add((record.session_id, record.seq))
    finally:
        await consumer.stop()
    return {"records": records, "distinct": len(distinct), "statuses": dict(statuses)}


def fd_plan(config: ScaleBenchConfig) -> dict[str, Any]:
    """Descriptors each process needs, against the hard limit the children inherit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The interceptor holds a client and an upstream connection per session, the backend one
    # per session, a load process one per session of its share; plus room for the rest.
    needed = {
        "interceptor": 2 * config.sessions + 512,
        "backend": config.sessions + 256,
        "load": -(-config.sessions // config.clients) + 256,
    }
    unlimited = hard == resource.RLIM_INFINITY
    return {
        "soft": soft,
        "hard": "unlimited" if unlimited else hard,
        "needed": needed,
        "blocked": not unlimited and max(needed.values()) > hard,
    }


async def _run_load(
    config: ScaleBenchConfig, url: str, key_prefix: str, tmp: Path, env: dict[str, str]
) -> tuple[list[Call], list[dict[str, Any]]]:
    """Run the load processes side by side; their calls, and each one's own figures."""
    start_at = time.time() + 2.0  # they import aiohttp first; then all start on one clock
    share = -(-config.sessions // config.clients)
    specs = [
        LoadSpec(
            url=url,
            first=i * share,
            count=min(share, config.sessions - i * share),
            turns=config.turns,
            max_tokens=config.max_tokens,
            start_at=start_at,
            ramp_s=config.call_s,
            key_prefix=key_prefix,
            call_timeout_s=config.call_timeout_s,
        )
        for i in range(config.clients)
    ]
    pin = _pin_and_nofile(config.client_core, 0)
    results = await load_processes(
        "rollstream.dev.bench.scale_load", [asdict(s) for s in specs], tmp, env, pin
    )
    calls: list[Call] = [tuple(c) for r in results for c in r["calls"]]
    clients = [
        {
            "sessions": len({c[0] for c in r["calls"]}),
            "cpu_s": r["cpu_s"],
            "cpu_utilisation": round(r["cpu_s"] / max(r["wall_s"], 1e-9), 3),
            "nofile_soft": r["nofile_soft"],
        }
        for r in results
    ]
    return calls, clients


def _log_errors(log: Path) -> int:
    """Lines of a process log that report an error or a traceback."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines() if "ERROR" in line or "Traceback" in line)


def _interceptor_figures(
    sampler: Sampler, start_kb: int, status: dict[str, int], load: dict[str, Any], sessions: int
) -> dict[str, Any]:
    first, last = sampler.samples[0], sampler.samples[-1]
    cpu, wait = last[2] - first[2], last[3] - first[3]
    return {
        "rss_start_mb": round(start_kb / 1024, 1),
        "rss_peak_sampled_mb": round(max(s[1] for s in sampler.samples) / 1024, 1),
        "hwm_mb": round(status["VmHWM"] / 1024, 1),
        "rss_end_mb": round(status["VmRSS"] / 1024, 1),
        "kb_per_session": round((status["VmHWM"] - start_kb) / sessions, 1),
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_call": round(cpu / max(load["calls"], 1) * 1000, 2),
        "wait_s": round(wait, 2),
        "all_open": window_usage(sampler.samples, load["all_open"]),
        "fds_peak": sampler.fds_peak,
    }


async def run_scale_bench(
    config: ScaleBenchConfig, kafka: KafkaSettings, progress: Any = print
) -> dict[str, Any]:
    """Run the sessions through one pinned interceptor; the topics must exist."""
    key_prefix = f"scale-{os.getpid()}-{int(time.time())}-"
    fds = fd_plan(config)
    if fds["blocked"]:
        progress(f"  open-file hard limit {fds['hard']} is below what is needed: {fds['needed']}")
    backend_port, proxy_port = free_port(), free_port()
    upstream, base = f"http://127.0.0.1:{backend_port}", f"http://127.0.0.1:{proxy_port}"
    url = f"{base}/v1/chat/completions"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp, env = Path(tmp_name), bench_env(kafka, tmp_name)
        latency = ("--tpot-ms", str(config.tpot_ms), "--ttft-ms", str(config.ttft_ms))
        backend_cmd = rollstream_command("backend", "--port", str(backend_port), *latency)
        proxy_cmd = rollstream_command(
            "interceptor", "--port", str(proxy_port), "--upstream", upstream, "--admin-port", "0"
        )
        needed = fds["needed"]
        backend = _spawn(backend_cmd, config.backend_core, needed["backend"], tmp / "be.log", env)
        proxy: subprocess.Popen[bytes] | None = None
        try:
            await wait_healthy(f"{upstream}/health")
            proxy = _spawn(
                proxy_cmd, config.interceptor_core, needed["interceptor"], tmp / "proxy.log", env
            )
            await wait_healthy(f"{base}/health")
            async with aiohttp.ClientSession() as http:  # its imports done, outside the run's keys
                body = chat_body([{"role": "user", "content": "warm up"}], 2)
                await stream_call(http, url, body, f"warmup-{os.getpid()}")
            start_kb = status_kb(proxy.pid)["VmRSS"]
            sampler = Sampler(proxy.pid, config.sample_interval_s)
            sampling = asyncio.create_task(sampler.run())
            backend_before = process_cpu_seconds(backend.pid)
            progress(
                f"  {config.sessions} sessions x {config.turns} calls of {config.max_tokens} "
                f"tokens, {config.clients} load process(es)"
            )
            try:
                calls, clients = await _run_load(config, url, key_prefix, tmp, env)
            finally:
                sampling.cancel()
                await asyncio.gather(sampling, return_exceptions=True)
                sampler.sample()  # the last one
            backend_cpu = process_cpu_seconds(backend.pid) - backend_before
            status = status_kb(proxy.pid)
            proxy.terminate()  # a clean stop flushes the publisher
            exit_code = proxy.wait(timeout=60)
        finally:
            for proc in (proxy, backend):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=30)
        proxy_log_errors = _log_errors(tmp / "proxy.log")
    load = summarise_calls(calls, config.sessions, config.turns)
    interceptor = _interceptor_figures(sampler, start_kb, status, load, config.sessions)
    interceptor |= {"exit_code": exit_code, "log_errors": proxy_log_errors}
    records = await count_records(kafka, key_prefix)
    result = {
        "config": asdict(config) | {"call_s": config.call_s},
        "load": load,
        "clients": clients,
        "interceptor": interceptor,
        "backend": {
            "processes": 1,
            "cpu_utilisation": round(backend_cpu / max(load["wall_s"], 1e-9), 3),
        },
        "kafka": records,
        "fd_limits": fds,
    }
    result["target"] = target_verdict(result)
    progress(
        f"  {load['calls']} calls, {load['errors']} errors, peak {load['peak_sessions_open']} "
        f"sessions open, interceptor VmHWM {interceptor['hwm_mb']} MB, "
        f"{interceptor['cpu_ms_per_call']} ms CPU/call, {records['records']} records"
    )
    return result
