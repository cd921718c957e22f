"""The specs of the benchmarks of serving and capture: backend, proxies, node, wall, fidelity."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rollstream.dev.bench.backend import BackendBenchConfig, run_backend_bench
from rollstream.dev.bench.interceptor import (
    VLLM_SIZES,
    InterceptorBenchConfig,
    run_interceptor_bench,
)
from rollstream.dev.bench.node import NodeBenchConfig, run_node_bench
from rollstream.dev.bench.scale import ScaleBenchConfig, run_scale_bench
from rollstream.dev.bench.spec import Bench, Engine, Env, Option, create_topics, rounds_option
from rollstream.dev.bench.stream import StreamBenchConfig, run_stream_bench
from rollstream.dev.bench.wall import WallBenchConfig, run_wall_bench
from rollstream.settings import StatePaths


async def _backend(config: BackendBenchConfig, env: Env) -> dict[str, Any]:
    return await run_backend_bench(config, env.say)


async def _interceptor(config: InterceptorBenchConfig, env: Env) -> dict[str, Any]:
    await create_topics(env.kafka, 1)
    return await run_interceptor_bench(
        config, env.kafka.bootstrap_servers, env.kafka.topic_prefix, env.say
    )


def _interceptor_config(values: dict[str, Any], engine: Engine) -> InterceptorBenchConfig:
    # A tiny model on the CPU build prefills an 8k prompt in about a second: the vLLM run is
    # smaller, so three paths in three rounds take minutes, not an hour.
    base = InterceptorBenchConfig() if engine == "reference" else VLLM_SIZES
    return replace(
        base,
        calls=values["calls"] or base.calls,
        streams=values["streams"] or base.streams,
        engine=engine,
    )


async def _stream(config: StreamBenchConfig, env: Env) -> dict[str, Any]:
    from rollstream.dev.bench.stream_report import verdicts

    await create_topics(env.kafka, 3)
    result = await run_stream_bench(config, env.kafka, env.say)
    result["targets"] = verdicts(result).as_dict()
    return result


async def _scale(config: ScaleBenchConfig, env: Env) -> dict[str, Any]:
    await create_topics(env.kafka, 3)
    return await run_scale_bench(config, env.kafka, env.say)


async def _node(config: NodeBenchConfig, env: Env) -> dict[str, Any]:
    work_root = env.extra["work_root"]
    if work_root is not None:
        work_root.mkdir(parents=True, exist_ok=True)
    return await run_node_bench(config, env.say, work_root)


def _node_config(values: dict[str, Any], _: Engine) -> NodeBenchConfig:
    runtimes = ("local", "docker") if values.pop("runtime") == "docker" else ("local",)
    values.pop("work_root")
    return NodeBenchConfig(**values, runtimes=runtimes)


@dataclass(frozen=True)
class LongSessionConfig:
    """Which long sessions to run (empty: :data:`RUNS`)."""

    calls: tuple[int, ...] = ()


def _long_session(config: LongSessionConfig, env: Env) -> dict[str, Any]:
    # Synchronous: each session brings a stack up and down step by step; an interrupt stops it
    # where it is, with its clean-up (`down`) still ahead of the topics' deletion.
    from rollstream.dev.bench.long_stack import RUNS, LongRun, run_session

    known = {run.calls: run for run in RUNS}
    runs = [known.get(n, LongRun(n)) for n in config.calls] if config.calls else list(RUNS)
    out = []
    with tempfile.TemporaryDirectory(prefix="rollstream-long-") as tmp:
        for run in runs:
            env.say(f"long-session: {run.calls} calls ({run.instruction})")
            out.append(run_session(env.kafka, run, Path(tmp), f"long-{run.calls}"))
            env.say(
                f"  {out[-1]['segments']} segments, {out[-1]['trajectory_bytes']:,} bytes, "
                f"client peak {out[-1]['client_peak_mb']} MB"
            )
    return {"runs": out}


def _fidelity_config(values: dict[str, Any], engine: Engine) -> Any:
    from rollstream.dev.bench import fidelity as fb
    from rollstream.dev.bench.fidelity_serving import FidelityBenchConfig
    from rollstream.dev.engine.families import ENGINE_FAMILIES
    from rollstream.models.families import FAMILIES

    known = tuple(ENGINE_FAMILIES) if engine == "vllm" else tuple(FAMILIES)
    return FidelityBenchConfig(
        families=fb.parse_names(values["families"], known, "families"),
        harnesses=fb.parse_names(values["harnesses"], FidelityBenchConfig.harnesses, "harnesses"),
        modes=fb.parse_modes(values["modes"]),
        timeout_s=values["timeout_s"],
        engine=engine,
    )


async def _fidelity(config: Any, env: Env) -> dict[str, Any]:
    from rollstream.dev.bench.fidelity import run_fidelity_bench
    from rollstream.sandbox.harnesses.install import install
    from rollstream.sandbox.harnesses.python_install import PYTHON_PACKAGES, install_python

    cache = StatePaths().cache_dir
    bin_dir = await asyncio.to_thread(install, cache)
    for name in set(config.harnesses) & set(PYTHON_PACKAGES):
        await asyncio.to_thread(install_python, name, cache)
    return await run_fidelity_bench(config, env.kafka, bin_dir, env.say)


SERVING: tuple[Bench, ...] = (
    Bench(
        "backend",
        BackendBenchConfig,
        _backend,
        "Streamed tokens/s and concurrent streams of the reference backend on one core.",
        lambda c: f"reference backend, {c.policy} policy, {c.max_tokens} tokens per stream:",
        (
            Option("concurrency", "Levels, comma-separated.", low=1),
            Option("max_tokens"),
            Option("tpot_ms", "Time per output token (ms)."),
            Option("ttft_ms"),
            Option("policy", choices=("tiny", "scripted")),
        ),
    ),
    Bench(
        "interceptor",
        InterceptorBenchConfig,
        _interceptor,
        "Direct vs plain mitmproxy vs rollstream: proxy CPU per call and added TTFT.\n\n"
        "Needs a broker for rollstream's records (`rollstream kafka start`); they go to topics "
        "under the prefix `bench-<time>` so the run leaves the real topics alone.",
        lambda c: f"interceptor: direct, plain mitmproxy, rollstream, on {c.engine}",
        (
            Option(
                "calls", "Long-prompt calls per path [default: 120, vllm 24].", extra=True, kind=int
            ),
            Option(
                "streams",
                "Concurrent streams for TTFT [default: 32, vllm 8].",
                extra=True,
                kind=int,
            ),
        ),
        broker=True,
        engine="serving qwen3's tiny model, at smaller sizes",
        make_config=_interceptor_config,
    ),
    Bench(
        "stream",
        StreamBenchConfig,
        _stream,
        "Streamed tokens/s and proxy CPU per token: plain mitmproxy vs rollstream, 1 and 2 "
        "workers.\n\n"
        "The reference backend streams long answers as fast as it can through each path in turn "
        "(rounds alternating the order); the CPU of every proxy process, the backend, the load "
        "and the machine is read from /proc, so the summary says what bounds the run. Needs a "
        "broker (`rollstream kafka start`); the records go to topics under the prefix "
        "`bench-<time>`, deleted afterwards once they are counted.",
        lambda c: (
            f"stream: {c.sessions} sessions of {c.max_tokens}-token answers, "
            f"{c.duration_s:g} s per path, {c.rounds} rounds: {', '.join(c.paths)}"
        ),
        (
            Option("max_tokens", "Tokens per answer.", low=1),
            Option(
                "sessions",
                "Concurrent sessions, each its own key and connection, calls in a row.",
                low=1,
            ),
            Option(
                "duration_s", "Seconds of load per path and round.", "duration", 0, open_low=True
            ),
            rounds_option(),
            Option("router", "Also two workers reached through the pool's router (one address)."),
            Option("clients", "Load-generator processes sharing the sessions.", low=1),
        ),
        broker=True,
    ),
    Bench(
        "node",
        NodeBenchConfig,
        _node,
        "Sessions/minute of one node with the `command` harness, with and without "
        "pre-warming.\n\n"
        "No Kafka: lifecycle records and call counts stay in the process. The local runtime, "
        "and with --runtime docker the docker runtime beside it in the same rounds.",
        lambda c: (
            f"node: {c.sessions} sessions per round, max_init={c.max_init} "
            f"max_run={c.max_run}, prewarm=0 vs prewarm={c.prewarm}, runtimes "
            f"{', '.join(c.runtimes)}, {c.rounds} rounds"
        ),
        (
            Option(
                "sessions",
                "Sessions per round and mode (one task's samples, submitted at once).",
                low=1,
                high=3000,
            ),
            rounds_option(),
            Option("max_init", low=1),
            Option("max_run", low=1),
            Option("max_post", low=1),
            Option("prewarm", "Pre-warming of the mode compared with prewarm=0.", low=1),
            Option("setup_s", "Seconds the setup command sleeps (init cost).", low=0),
            Option("run_s", "Seconds the harness command sleeps.", low=0),
            Option("files", "Inline workspace files per session.", low=0),
            Option(
                "work_root",
                "Where session directories go (default: the temp dir).",
                extra=True,
                kind=Path,
            ),
            Option(
                "runtime",
                "docker: the same rounds in containers too, side by side with the local runtime, "
                "and a container's start and removal cost (the engine DOCKER_HOST names).",
                choices=("local", "docker"),
                extra=True,
                default="local",
            ),
            Option("image", "The sessions' image with --runtime docker (it needs bash and sleep)."),
        ),
        make_config=_node_config,
    ),
    Bench(
        "wall",
        WallBenchConfig,
        lambda config, env: run_wall_bench(config, env.say),
        "What a session's network wall costs: process start and relayed traffic, vs none.\n\n"
        "Side by side in the same rounds; needs user namespaces (no broker, no interceptor).",
        lambda _: "wall: walled against direct, process start and relayed traffic",
        (rounds_option(), Option("starts", "Processes started per round and mode.", low=1)),
    ),
    Bench(
        "scale",
        ScaleBenchConfig,
        _scale,
        "Concurrent streaming sessions through one interceptor process: errors, RSS, CPU.\n\n"
        "The interceptor runs pinned to its own core in front of the reference backend, whose "
        "latency model keeps every session's stream open at once. Needs a broker (`rollstream "
        "kafka start`); the records go to topics under the prefix `bench-<time>`, deleted "
        "afterwards once they are counted.",
        lambda c: f"scale: {c.sessions} concurrent streaming sessions through one interceptor",
        (
            Option("sessions", "Sessions at once, each with its own connection and key.", low=1),
            Option(
                "turns",
                "Streamed calls per session, one after another (growing conversation).",
                low=1,
            ),
            Option("max_tokens", "Tokens per answer.", low=1),
            Option("ttft_ms", "Backend latency model: time to first token (ms).", low=0),
            Option("tpot_ms", "Backend latency model: time per output token (ms).", low=0),
            Option("clients", "Load-generator processes sharing the sessions.", low=1),
        ),
        broker=True,
        outro=lambda r: f"target {'met' if r['target']['met'] else 'MISSED'}",
    ),
    Bench(
        "long-session",
        LongSessionConfig,
        _long_session,
        "Long sessions with a break at every call through the local stack: bytes and memory.\n\n"
        "Needs a broker (`rollstream kafka start`); each session gets a stack of its own (`up`) "
        "under a temporary directory and topics under the prefix `bench-<time>`, deleted "
        "afterwards.",
        lambda _: "long-session: the local stack, a break at every call",
        (
            Option(
                "calls",
                "Sessions of this many calls (repeatable; default: 1,500, and 10,000 compacted "
                "every 300 calls).",
                low=2,
                multiple=True,
            ),
        ),
        broker=True,
    ),
    Bench(
        "fidelity",
        object,
        _fidelity,
        "Model families x real harnesses x context modes: how faithfully each session trains.\n\n"
        "Each harness runs headless on one tool task through an interceptor in front of the "
        "scripted reference backend serving each family, or a real vLLM serving its tiny model "
        "(`--engine vllm`: the families the engine serves; one server per family, one at a "
        "time). Needs a broker (`rollstream kafka start`) and the harnesses (installed if "
        "missing); records go to topics under the prefix `bench-<time>`, deleted afterwards.",
        lambda c: (
            f"fidelity: {len(c.families)} families x {len(c.harnesses)} harnesses x "
            f"{len(c.modes)} modes on {c.engine}"
        ),
        (
            Option("families", "Comma-separated.", extra=True, default="all"),
            Option("harnesses", "Comma-separated.", extra=True, default="all"),
            Option("modes", "Context modes.", extra=True, default="ordinary,exact"),
            Option("timeout_s", low=1, extra=True, kind=float, default=180.0),
        ),
        broker=True,
        engine="serving each family's tiny model (the families the engine serves)",
        make_config=_fidelity_config,
    ),
)
