"""``rollstream bench pipeline``: the reconstructor and the scorer through real Kafka.

The two services run as subprocesses (``rollstream reconstruct`` and ``rollstream score``, as
they are deployed) on fresh topics; this process produces the load and reads their output with
a ``read_committed`` consumer. Three measurements, one after the other:

- **Reconstructor throughput**: the events topic is prefilled with synthetic sessions, then the
  reconstructor starts. Its output arrives one transaction at a time, so the rate is the calls
  of the trajectories that arrived after the first transaction, over the time from the first
  arrival to the last: the service's start and group join are not counted.
- **Scorer throughput**: the same, once every trajectory is in, for the scorer (trivial
  evaluator) on the trajectories topic.
- **End to end**: with both running and idle, sessions arrive at a steady rate (each session's
  records spread over a few seconds, sessions overlapping). Per session, the time from handing
  its SessionEnded (its last record) to the producer until its Scored record reaches the
  reader, and until its trajectory does.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from rollstream.dev.bench.common import percentile
from rollstream.dev.bench.pipeline_run import PipelineRun, ServiceProcess
from rollstream.dev.bench.pipeline_setup import (
    bench_group,
    input_shape,
    input_summary,
    reconstruct_args,
    score_args,
    session_load,
)
from rollstream.dev.synthetic import SyntheticShape
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_producer
from rollstream.schemas import AvroSerializer, TopicNames, topic_specs
from rollstream.schemas.trajectories import Scored, Trajectory
from rollstream.settings import KafkaSettings

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PipelineBenchConfig:
    """The sizes of one run."""

    # Throughput: `sessions` sessions (copies of `pool` distinct ones) of `calls` calls, prompts
    # from 8,000 to 32,010 tokens with the defaults.
    sessions: int = 300
    pool: int = 10
    calls: int = 50
    system_tokens: int = 8000
    tool_result_tokens: int = 450
    completion_tokens: int = 40
    # End to end: `rate` sessions/s for `duration_s`, each session's records over
    # `session_spread_s`.
    rate: float = 20.0
    duration_s: float = 20.0
    e2e_pool: int = 20
    e2e_calls: int = 10
    e2e_system_tokens: int = 2000
    e2e_tool_result_tokens: int = 200
    e2e_completion_tokens: int = 50
    session_spread_s: float = 2.0
    partitions: int = 3
    strategy: str = "prefix_merge"
    evaluator: str = "session_completed"
    # The services' own --max-batch-records (their defaults); one transaction per batch.
    reconstructor_batch_records: int = 2000
    scorer_batch_records: int = 32
    timeout_s: float = 300.0


async def produce_all(
    producer: AIOKafkaProducer, topic: str, sessions: list[tuple[str, list[bytes]]]
) -> None:
    """Send every session's records keyed by its id; return once all are acknowledged."""
    futures = []
    for sid, values in sessions:
        for value in values:
            futures.append(await producer.send(topic, value, key=sid.encode()))
    await asyncio.gather(*futures)


def _rate(times: list[float], weights: list[int], service: ServiceProcess) -> dict[str, Any]:
    """Units/s after the first output transaction, the service's CPU over the same span."""
    first, last = min(times), max(times)
    measured = sum(w for t, w in zip(times, weights, strict=True) if t > first)
    span = last - first
    cpu = service.cpu_between(first, last)
    return {
        "per_s": round(measured / span) if span > 0 and measured else None,
        "measured": measured,
        "span_s": round(span, 3),
        "cpu_utilisation": round(cpu / span, 3) if span > 0 else None,
        "cpu_wait_share": round(service.waited_between(first, last) / span, 3)
        if span > 0
        else None,
        "cpu_ms_per_unit": round(cpu / measured * 1000, 4) if measured else None,
        # What one core would sustain at this CPU cost: on a busy machine the service may get
        # only a share of a core, and the rate alone would not say so.
        "per_core_s": round(measured / cpu) if measured and cpu > 0 else None,
        "rss_mb": round(service.peak_rss(last), 1),
    }


def _schedule(config: PipelineBenchConfig) -> list[tuple[float, str, bytes, bool]]:
    """(send at, session id, value, is SessionEnded) of the end-to-end load, by time."""
    shape = SyntheticShape(
        turns=config.e2e_calls,
        system_tokens=config.e2e_system_tokens,
        tool_result_tokens=config.e2e_tool_result_tokens,
        completion_tokens=config.e2e_completion_tokens,
    )
    count = max(1, round(config.rate * config.duration_s))
    sends = []
    for i, (sid, values) in enumerate(session_load("e2e", count, config.e2e_pool, shape)):
        step = config.session_spread_s / max(1, len(values) - 1)
        for k, value in enumerate(values):
            sends.append((i / config.rate + k * step, sid, value, k == len(values) - 1))
    return sorted(sends, key=lambda s: s[0])


async def run_pipeline_bench(
    config: PipelineBenchConfig, kafka: KafkaSettings, progress: Progress = print
) -> dict[str, Any]:
    """All three measurements on topics under ``kafka.topic_prefix``."""
    names = TopicNames(kafka.topic_prefix)
    async with TopicAdmin(kafka) as admin:
        await admin.create(topic_specs(names, partitions=config.partitions))
    load = session_load("tp", config.sessions, config.pool, input_shape(config))
    schedule = _schedule(config)
    producer = make_producer(kafka)
    await producer.start()
    try:
        progress(f"  prefilling {names.events} with {config.sessions} sessions")
        await produce_all(producer, names.events, load)
        with tempfile.TemporaryDirectory() as tmp:
            async with PipelineRun(kafka, Path(tmp), config.timeout_s) as run:
                recon = await _reconstructor_throughput(config, run)
                progress(f"  reconstructor: {recon['per_s']} calls/s")
                score = await _scorer_throughput(config, run)
                progress(f"  scorer: {score['per_s']} trajectories/s")
                e2e = await _end_to_end(config, run, producer, schedule, progress)
    finally:
        await producer.stop()
    return {
        "config": asdict(config),
        "services": "subprocesses",
        "reconstructor": {**input_summary(config), **recon},
        "scorer": {"trajectories": config.sessions, **score},
        "end_to_end": e2e,
    }


async def _reconstructor_throughput(
    config: PipelineBenchConfig, run: PipelineRun
) -> dict[str, Any]:
    reconstructor = run.start_service(
        "reconstructor", *reconstruct_args(config, bench_group(run.kafka, "reconstruct"))
    )
    await run.wait_for(run.trajectories, "tp-", config.sessions)
    times, values = run.trajectories.take()
    serializer = AvroSerializer()
    trajectories = [serializer.decode_as(v, Trajectory) for v in values]
    result = _rate(times, [t.stats.calls for t in trajectories], reconstructor)
    result["statuses"] = dict(Counter(t.status.value for t in trajectories))
    result["duplicates"] = run.trajectories.duplicates("tp-")
    return result


async def _scorer_throughput(config: PipelineBenchConfig, run: PipelineRun) -> dict[str, Any]:
    scorer = run.start_service("scorer", *score_args(config, bench_group(run.kafka, "score")))
    await run.wait_for(run.scored, "tp-", config.sessions)
    times, values = run.scored.take()
    serializer = AvroSerializer()
    result = _rate(times, [1] * len(times), scorer)
    result["rewards"] = dict(Counter(str(serializer.decode_as(v, Scored).reward) for v in values))
    result["duplicates"] = run.scored.duplicates("tp-")
    return result


def _ms(values: list[float], q: float) -> float | None:
    """The q percentile rounded, None for no values (JSON has no NaN)."""
    return round(percentile(values, q), 1) if values else None


async def _end_to_end(
    config: PipelineBenchConfig,
    run: PipelineRun,
    producer: AIOKafkaProducer,
    schedule: list[tuple[float, str, bytes, bool]],
    progress: Progress,
) -> dict[str, Any]:
    sessions = sum(1 for s in schedule if s[3])
    progress(f"  end to end: {sessions} sessions of {config.e2e_calls} calls at {config.rate:g}/s")
    reconstructor, scorer = run.services
    ended: dict[str, float] = {}
    began = time.perf_counter()
    for at, sid, value, last in schedule:
        delay = began + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if last:
            ended[sid] = time.perf_counter()
        await producer.send(run.names.events, value, key=sid.encode())
    with contextlib.suppress(TimeoutError):  # what is missing is reported, not raised
        await run.wait_for(run.scored, "e2e-", sessions)
    done = time.perf_counter()
    scored = run.scored.first
    latencies = [(scored[s] - t) * 1000 for s, t in ended.items() if s in scored]
    to_trajectory = [
        (run.trajectories.first[s] - t) * 1000
        for s, t in ended.items()
        if s in run.trajectories.first
    ]
    first_end, last_end = min(ended.values()), max(ended.values())
    achieved = (len(ended) - 1) / (last_end - first_end) if len(ended) > 1 else config.rate
    return {
        "sessions": sessions,
        "calls_per_session": config.e2e_calls,
        "prompt_tokens_last": config.e2e_system_tokens
        + (config.e2e_calls - 1) * (config.e2e_completion_tokens + config.e2e_tool_result_tokens),
        "rate_target": config.rate,
        "rate_achieved": round(achieved, 1),
        "scored": len(latencies),
        "missing": sessions - len(latencies),
        "duplicates": run.scored.duplicates("e2e-"),
        "latency_p50_ms": _ms(latencies, 50),
        "latency_p90_ms": _ms(latencies, 90),
        "latency_p99_ms": _ms(latencies, 99),
        "latency_max_ms": _ms(latencies, 100),
        "trajectory_p50_ms": _ms(to_trajectory, 50),
        "trajectory_p99_ms": _ms(to_trajectory, 99),
        "reconstructor_cpu_utilisation": round(
            reconstructor.cpu_between(began, done) / (done - began), 3
        ),
        "scorer_cpu_utilisation": round(scorer.cpu_between(began, done) / (done - began), 3),
    }
