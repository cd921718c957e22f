"""``rollstream bench reconstruct``: reconstruction throughput, and SessionEnded → trajectory.

Three measurements:

- **Throughput per process**, in-process without Kafka: synthetic sessions of 50 calls whose
  prompts grow from 8k to 32k tokens, delta-encoded as the interceptor writes them and Avro
  encoded. Timed per strategy: Avro-decoding every record, feeding them to
  :class:`PartitionBuffers`, :func:`build_trajectory` (delta resolution and the strategy) and
  Avro-encoding the trajectory: the service's work per session, minus Kafka.
- **End to end through Kafka**: the reconstructor service (``rollstream reconstruct``, its own
  process) on fresh topics, sessions produced at a steady rate (each session's records spread
  over a second, sessions overlapping). Per session, the time from handing its SessionEnded to
  the producer until its trajectory reaches a ``read_committed`` consumer.
- **Long sessions**, in-process: the cost per call of sessions of 100 to 10,000 calls whose
  context grows to 100k tokens (:mod:`rollstream.dev.bench.long_sessions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.consumers.reconstruct.buffers import PartitionBuffers
from rollstream.consumers.reconstruct.strategies import get_strategy
from rollstream.dev.bench.backend import rollstream_command, serving
from rollstream.dev.bench.common import percentile, process_cpu_seconds, process_rss_mb
from rollstream.dev.bench.long_sessions import (
    PHASES,
    long_sessions_section,
    measure_long_sessions,
    reconstruct_once,
)
from rollstream.dev.bench.runner import table
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_consumer, make_producer, topic_partitions
from rollstream.schemas import AvroSerializer, SessionEnded, TopicNames, topic_specs
from rollstream.schemas.trajectories import Trajectory
from rollstream.settings import KafkaSettings

Progress = Callable[[str], None]
TARGETS = {"calls_per_s": 1000, "sessions_per_s": 100, "latency_p99_ms": 500}


@dataclass(frozen=True)
class ReconstructBenchConfig:
    """The sizes of one run (the defaults take a few minutes)."""

    # Throughput: sessions of ``calls`` calls, prompts from system_tokens growing by
    # completion_tokens + tool_result_tokens a call (8000 -> 32010 tokens with the defaults).
    sessions: int = 30
    calls: int = 50
    system_tokens: int = 8000
    tool_result_tokens: int = 450
    completion_tokens: int = 40
    rounds: int = 5
    strategies: tuple[str, ...] = ("prefix_merge", "tree")
    # End to end: short sessions at ``rate`` sessions/s for ``duration_s``.
    e2e: bool = True
    rate: float = 100.0
    duration_s: float = 20.0
    e2e_calls: int = 5
    e2e_system_tokens: int = 1000
    e2e_tool_result_tokens: int = 50
    e2e_completion_tokens: int = 20
    session_spread_s: float = 1.0
    partitions: int = 3
    service_strategy: str = "prefix_merge"
    drain_timeout_s: float = 30.0
    startup_timeout_s: float = 90.0
    # Long sessions: one session per size, contexts growing to long_final_tokens (empty: skip).
    long_calls: tuple[int, ...] = (100, 2_000, 10_000)
    long_final_tokens: int = 100_000
    long_system_tokens: int = 2_000
    long_rounds: int = 3
    long_strategy: str = "prefix_merge"


# Throughput -------------------------------------------------------------------------------


def measure_throughput(config: ReconstructBenchConfig, progress: Progress) -> dict[str, Any]:
    """Calls/s of decode + buffers + build_trajectory + encode, per strategy, one process."""
    shape = SyntheticShape(
        turns=config.calls,
        system_tokens=config.system_tokens,
        tool_result_tokens=config.tool_result_tokens,
        completion_tokens=config.completion_tokens,
    )
    serializer = AvroSerializer()
    sessions = [
        [serializer.encode(r) for r in synthetic_session(f"tp-{i}", shape, seed=i).records]
        for i in range(config.sessions)
    ]
    calls = config.sessions * config.calls
    results = []
    for name in config.strategies:
        strategy = get_strategy(name)
        rounds = []
        for _ in range(config.rounds):
            phases = dict.fromkeys(PHASES, 0.0)
            buffers = PartitionBuffers(0)
            offset = segments = 0
            for values in sessions:
                took, out, _ = reconstruct_once(values, serializer, strategy, name, buffers, offset)
                offset += len(values)
                phases = {phase: phases[phase] + took[phase] for phase in PHASES}
                segments += sum(len(trajectory.segments) for trajectory in out)
            rounds.append((calls / sum(phases.values()), phases, segments))
        rates = sorted(r[0] for r in rounds)
        median = sorted(rounds, key=lambda r: r[0])[len(rounds) // 2]
        result = {
            "strategy": name,
            "calls_per_s": round(median[0]),
            "calls_per_s_range": [round(rates[0]), round(rates[-1])],
            "ms_per_call": {k: round(v / calls * 1000, 4) for k, v in median[1].items()},
            "segments_per_session": round(median[2] / config.sessions, 2),
        }
        progress(
            f"  {name}: {result['calls_per_s']} calls/s (range {rates[0]:.0f}-{rates[-1]:.0f}; "
            f"ms/call {result['ms_per_call']})"
        )
        results.append(result)
    return {
        "sessions": config.sessions,
        "calls_per_session": config.calls,
        "prompt_tokens_first": config.system_tokens,
        "prompt_tokens_last": config.system_tokens
        + (config.calls - 1) * (config.completion_tokens + config.tool_result_tokens),
        "strategies": results,
    }


# End to end -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Send:
    at: float  # seconds after the start of production
    key: bytes
    value: bytes
    ends: str | None  # the session this SessionEnded ends


def _schedule(config: ReconstructBenchConfig, count: int) -> list[_Send]:
    """Every record of ``count`` sessions, sessions starting 1/rate apart, records spread."""
    shape = SyntheticShape(
        turns=config.e2e_calls,
        system_tokens=config.e2e_system_tokens,
        tool_result_tokens=config.e2e_tool_result_tokens,
        completion_tokens=config.e2e_completion_tokens,
    )
    serializer = AvroSerializer()
    out = []
    for i in range(count):
        session_id = f"e2e-{i}"
        records = synthetic_session(session_id, shape, group_id=f"g-{i}", seed=i).records
        step = config.session_spread_s / max(1, len(records) - 1)
        for k, record in enumerate(records):
            ends = session_id if isinstance(record, SessionEnded) else None
            at = i / config.rate + k * step
            out.append(_Send(at, session_id.encode(), serializer.encode(record), ends))
    return sorted(out, key=lambda s: s.at)


async def measure_end_to_end(
    config: ReconstructBenchConfig, kafka: KafkaSettings, progress: Progress
) -> dict[str, Any]:
    """SessionEnded → trajectory latency through the reconstructor service at ``config.rate``."""
    names = TopicNames(kafka.topic_prefix)
    async with TopicAdmin(kafka) as admin:
        await admin.create(topic_specs(names, partitions=config.partitions))
    count = max(1, round(config.rate * config.duration_s))
    schedule = _schedule(config, count)
    warmup = synthetic_session("e2e-warmup", SyntheticShape(turns=1, system_tokens=16))
    serializer = AvroSerializer()
    arrivals: dict[str, float] = {}
    statuses: Counter[str] = Counter()
    env = os.environ | {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
    }
    consumer, producer = make_consumer(kafka), make_producer(kafka)
    stop = asyncio.Event()

    async def collect() -> None:
        tps = await topic_partitions(consumer, names.trajectories)
        assert tps
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100)
            now = time.perf_counter()
            for messages in batch.values():
                for message in messages:
                    trajectory = serializer.decode_as(message.value or b"", Trajectory)
                    arrivals.setdefault(trajectory.session_id, now)
                    statuses[trajectory.status.value] += 1

    async def wait_for(sessions: set[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not sessions <= arrivals.keys():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    command = rollstream_command("reconstruct", "--strategy", config.service_strategy)
    command += ["--group", f"{kafka.topic_prefix}-bench"]
    async with contextlib.AsyncExitStack() as stack:
        for client in (consumer, producer):  # stopped in the reverse order
            await client.start()
            stack.push_async_callback(client.stop)
        log = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "reconstruct.log"
        service = await stack.enter_async_context(serving(command, None, log, env))
        collector = asyncio.create_task(collect())

        async def stop_collecting() -> None:
            stop.set()
            with contextlib.suppress(Exception):
                await collector

        stack.push_async_callback(stop_collecting)
        for record in warmup.records:
            await producer.send(names.events, serializer.encode(record), key=b"e2e-warmup")
        if not await wait_for({"e2e-warmup"}, config.startup_timeout_s):
            raise RuntimeError(
                f"the reconstructor emitted nothing within {config.startup_timeout_s} s: "
                f"{log.read_text()[-2000:]}"
            )
        statuses.clear()
        progress(
            f"  service up; producing {count} sessions of {config.e2e_calls} calls at "
            f"{config.rate:g}/s"
        )
        cpu_before = process_cpu_seconds(service.pid)
        ended: dict[str, float] = {}
        began = time.perf_counter()
        for send in schedule:
            delay = began + send.at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if send.ends is not None:
                ended[send.ends] = time.perf_counter()
            await producer.send(names.events, send.value, key=send.key)
        produced = time.perf_counter()
        await wait_for(set(ended), config.drain_timeout_s)
        drained = time.perf_counter()
        cpu = process_cpu_seconds(service.pid) - cpu_before
        rss = process_rss_mb(service.pid)
    latencies = [(arrivals[s] - t) * 1000 for s, t in ended.items() if s in arrivals]
    first_end, last_end = min(ended.values()), max(ended.values())
    achieved = (len(ended) - 1) / (last_end - first_end) if len(ended) > 1 else config.rate
    return {
        "strategy": config.service_strategy,
        "partitions": config.partitions,
        "sessions": count,
        "calls_per_session": config.e2e_calls,
        "prompt_tokens_last": config.e2e_system_tokens
        + (config.e2e_calls - 1) * (config.e2e_completion_tokens + config.e2e_tool_result_tokens),
        "rate_target": config.rate,
        "rate_achieved": round(achieved, 1),
        "production_s": round(produced - began, 2),
        "trajectories": len(latencies),
        "missing": count - len(latencies),
        "statuses": dict(statuses),
        "latency_p50_ms": round(percentile(latencies, 50), 1),
        "latency_p90_ms": round(percentile(latencies, 90), 1),
        "latency_p99_ms": round(percentile(latencies, 99), 1),
        "latency_max_ms": round(max(latencies, default=float("nan")), 1),
        "latency_mean_ms": round(statistics.fmean(latencies), 1) if latencies else None,
        "service_cpu_utilisation": round(cpu / (drained - began), 3),
        "service_rss_mb": round(rss, 1),
    }


async def run_reconstruct_bench(
    config: ReconstructBenchConfig, kafka: KafkaSettings | None, progress: Progress = print
) -> dict[str, Any]:
    """All three measurements (end to end only with ``kafka`` and ``config.e2e``)."""
    progress(
        f"throughput: {config.sessions} sessions of {config.calls} calls, in-process, "
        f"{config.rounds} rounds"
    )
    throughput = measure_throughput(config, progress)
    result: dict[str, Any] = {"config": asdict(config), "throughput": throughput}
    if config.long_calls:
        progress(
            f"long sessions: {', '.join(f'{n:,}' for n in config.long_calls)} calls, contexts "
            f"growing to {config.long_final_tokens:,} tokens, in-process"
        )
        result["long_sessions"] = measure_long_sessions(
            config.long_calls,
            config.long_final_tokens,
            config.long_system_tokens,
            config.long_rounds,
            config.long_strategy,
            progress,
        )
    if kafka is not None and config.e2e:
        progress(f"end to end: the reconstructor service over Kafka ({kafka.bootstrap_servers})")
        e2e = await measure_end_to_end(config, kafka, progress)
        progress(
            f"  {e2e['trajectories']}/{e2e['sessions']} trajectories at "
            f"{e2e['rate_achieved']} sessions/s: SessionEnded -> trajectory p50 "
            f"{e2e['latency_p50_ms']} ms, p99 {e2e['latency_p99_ms']} ms, max "
            f"{e2e['latency_max_ms']} ms; service CPU {e2e['service_cpu_utilisation']:.0%}"
        )
        result["end_to_end"] = e2e
    return result


def reconstruct_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: throughput per strategy, the long sessions, end to end."""
    config, throughput = result["config"], result["throughput"]
    rows = [
        (
            s["strategy"],
            "{:,} ({:,} to {:,})".format(s["calls_per_s"], *s["calls_per_s_range"]),
            " / ".join(str(s["ms_per_call"][phase]) for phase in PHASES),
            s["segments_per_session"],
        )
        for s in throughput["strategies"]
    ]
    header = ["strategy", "calls/s", "ms/call: decode / buffer / build / encode"]
    slowest = min(throughput["strategies"], key=lambda s: s["calls_per_s"])
    met = slowest["calls_per_s"] >= TARGETS["calls_per_s"]
    lines = [
        "## Reconstruction (`rollstream bench reconstruct`)",
        "",
        f"Throughput per process, in-process without Kafka: {throughput['sessions']} synthetic "
        f"sessions of {throughput['calls_per_session']} calls, prompts growing from "
        f"{throughput['prompt_tokens_first']:,} to {throughput['prompt_tokens_last']:,} tokens, "
        "delta-encoded against the previous call as the interceptor writes them. Timed per "
        "session: Avro decode of its records, PartitionBuffers, build_trajectory (delta "
        "resolution and the strategy), Avro encode of the trajectory; median of "
        f"{config['rounds']} rounds (range in brackets).",
        "",
        *table([*header, "segments/session"], "lrlr", rows),
        "",
        f"- Target ≥ {TARGETS['calls_per_s']:,} calls/s per process: "
        f"{'met' if met else 'MISSED'} (slowest: {slowest['strategy']} at "
        f"{slowest['calls_per_s']:,} calls/s).",
        "",
    ]
    e2e = result.get("end_to_end")
    if e2e is None:
        lines += ["End to end through Kafka: not run.", ""]
        return [*lines, *long_sessions_section(result.get("long_sessions"))]
    header = ["sessions/s achieved", "trajectories", "p50 (ms)", "p90 (ms)", "p99 (ms)"]
    header += ["max (ms)", "service CPU", "service RSS MB"]
    row = (
        e2e["rate_achieved"],
        f"{e2e['trajectories']} of {e2e['sessions']}",
        *(e2e[f"latency_{q}_ms"] for q in ("p50", "p90", "p99", "max")),
        f"{e2e['service_cpu_utilisation']:.0%}",
        e2e["service_rss_mb"],
    )
    rate_ok = (
        e2e["rate_target"] >= TARGETS["sessions_per_s"]
        and e2e["rate_achieved"] >= 0.95 * TARGETS["sessions_per_s"]
    )
    met = rate_ok and e2e["missing"] == 0 and e2e["latency_p99_ms"] <= TARGETS["latency_p99_ms"]
    lines += [
        f"End to end through Kafka: the reconstructor service (`rollstream reconstruct "
        f"--strategy {e2e['strategy']}`, its own process) on a {e2e['partitions']}-partition "
        f"events topic; {e2e['sessions']} sessions of {e2e['calls_per_session']} calls "
        f"(prompts up to {e2e['prompt_tokens_last']:,} tokens) produced at "
        f"{e2e['rate_target']:g} sessions/s, each session's records spread over "
        f"{config['session_spread_s']:g} s so sessions overlap. Latency per session: from "
        "handing its SessionEnded to the producer (linger 5 ms) until its trajectory reaches a "
        "`read_committed` consumer. Broker, service and load generator share the machine.",
        "",
        *table(header, "rrrrrrrr", [row]),
        "",
        f"- Target SessionEnded → trajectory p99 ≤ {TARGETS['latency_p99_ms']} ms "
        f"at {TARGETS['sessions_per_s']} sessions/s: {'met' if met else 'MISSED'} "
        f"(p99 {e2e['latency_p99_ms']} ms at {e2e['rate_achieved']} sessions/s, "
        f"{e2e['missing']} trajectories missing).",
        "",
    ]
    return [*lines, *long_sessions_section(result.get("long_sessions"))]
