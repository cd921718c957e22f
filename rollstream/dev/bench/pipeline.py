"""``rollstream bench pipeline``: the reconstructor and the scorer through real Kafka.

The services run as subprocesses on fresh topics; this process produces the load and reads
their output (:class:`PipelineRun`). Three measurements, one after the other:

- **Reconstructor throughput**: on a prefilled events topic, the calls of the trajectories
  that arrived after the first output transaction, over the time from the first arrival to
  the last (start-up and group join not counted).
- **Scorer throughput**: the same, once every trajectory is in, on the trajectories topic.
- **End to end**: both running, sessions arriving at a steady rate (each one's records spread
  over a few seconds); per session, from handing its SessionEnded to the producer until its
  Scored record, and its trajectory, reach the reader.
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
from rollstream.dev.bench.pipeline_run import (
    PipelineRun,
    ServiceProcess,
    bench_group,
    input_shape,
    input_summary,
    reconstruct_args,
    score_args,
    session_load,
)
from rollstream.dev.bench.runner import table
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


def _ms(values: list[float], q: str) -> float | None:
    """Percentile ``q`` (``p50``, ..., ``max``) rounded, None for no values (JSON has no NaN)."""
    return round(percentile(values, 100 if q == "max" else int(q[1:])), 1) if values else None


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
        **{f"latency_{q}_ms": _ms(latencies, q) for q in ("p50", "p90", "p99", "max")},
        **{f"trajectory_{q}_ms": _ms(to_trajectory, q) for q in ("p50", "p99")},
        "reconstructor_cpu_utilisation": round(
            reconstructor.cpu_between(began, done) / (done - began), 3
        ),
        "scorer_cpu_utilisation": round(scorer.cpu_between(began, done) / (done - began), 3),
    }


PIPELINE_TARGETS = {"calls_per_s": 1000, "latency_p99_ms": 2000}


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,}{unit}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))


def _service_row(name: str, r: dict[str, Any], unit: str, output: str) -> list[str]:
    """One service's throughput row; ``unit`` is what it counts: ``call`` or ``trajectory``."""
    per, unit = unit, {"call": "calls", "trajectory": "trajectories"}[unit]
    return [
        name,
        _num(r["per_s"], f" {unit}/s"),
        f"{r['measured']:,} {unit}, {r['span_s']} s",
        f"{_share(r['cpu_utilisation'])} / {_share(r.get('cpu_wait_share'))}",
        f"{_num(r['cpu_ms_per_unit'])} per {per}",
        _num(r.get("per_core_s"), f" {unit}/s"),
        r["rss_mb"],
        output,
    ]


def pipeline_section(result: dict[str, Any]) -> list[str]:
    """Reconstructor and scorer throughput through Kafka, end-to-end latency, verdicts."""
    config, rec, sco = result["config"], result["reconstructor"], result["scorer"]
    e2e = result["end_to_end"]
    rate, p99 = rec["per_s"], e2e["latency_p99_ms"]
    rate_ok = rate is not None and rate >= PIPELINE_TARGETS["calls_per_s"]
    p99_ok = p99 is not None and p99 <= PIPELINE_TARGETS["latency_p99_ms"] and not e2e["missing"]
    return [
        "## Pipeline through Kafka (`rollstream bench pipeline`)",
        "",
        f"The reconstructor (`rollstream reconstruct --strategy {config['strategy']}`) and the "
        f"scorer (`rollstream score`, evaluator `{config['evaluator']}`) run as "
        f"{result['services']}, one instance each, on fresh {config['partitions']}-partition "
        "topics of the local broker; this process produces the load and reads their output "
        "with a `read_committed` consumer. Broker, services and load generator share the "
        "machine.",
        "",
        f"Throughput: the events topic is prefilled with {rec['sessions']} synthetic sessions "
        f"of {config['calls']} calls (prompts up to {rec['prompt_tokens_last']:,} tokens, "
        f"delta-encoded), then the reconstructor starts; once every trajectory is in, the "
        f"scorer starts on them. Output arrives one transaction at a time (`--max-batch-records"
        f" {config['reconstructor_batch_records']}` and `{config['scorer_batch_records']}`): a "
        "rate counts what arrived after the first transaction, over the time from the first "
        "arrival to the last, so start-up and group join are left out. CPU: the service's, "
        "over the same span, and the time it was runnable but waiting for a core (/proc "
        "schedstat); per core at that cost: the rate one core would sustain at the measured "
        "CPU per unit (a busy machine gives the service only a share of a core).",
        "",
        *table(
            [
                "service",
                "rate",
                "measured over",
                "CPU / waiting for a CPU",
                "CPU ms per unit",
                "per core at that cost",
                "RSS MB",
                "output",
            ],
            "lrllrrrl",
            [
                _service_row(
                    "reconstructor",
                    rec,
                    "call",
                    f"{rec['sessions']} trajectories ({_counts(rec['statuses'])}), "
                    f"{rec['duplicates']} duplicated",
                ),
                _service_row(
                    "scorer",
                    sco,
                    "trajectory",
                    f"{sco['trajectories']} scored (rewards {_counts(sco['rewards'])}), "
                    f"{sco['duplicates']} duplicated",
                ),
            ],
        ),
        "",
        f"End to end: both services running, {e2e['sessions']} sessions of "
        f"{e2e['calls_per_session']} calls (prompts up to {e2e['prompt_tokens_last']:,} tokens) "
        f"arriving at {e2e['rate_target']:g} sessions/s, each session's records spread over "
        f"{config['session_spread_s']:g} s so sessions overlap. Latency per session: from "
        "handing its SessionEnded (its last record) to the producer (linger 5 ms) until its "
        "Scored record, and until its trajectory, reaches the `read_committed` reader.",
        "",
        *table(
            [
                "sessions/s achieved",
                "scored (missing, duplicated)",
                "→ trajectory p50 / p99 (ms)",
                "→ scored p50 / p90 / p99 / max (ms)",
                "reconstructor CPU",
                "scorer CPU",
            ],
            "rlllrr",
            [
                (
                    e2e["rate_achieved"],
                    f"{e2e['scored']} of {e2e['sessions']} ({e2e['missing']}, {e2e['duplicates']})",
                    " / ".join(_num(e2e[f"trajectory_{q}_ms"]) for q in ("p50", "p99")),
                    " / ".join(_num(e2e[f"latency_{q}_ms"]) for q in ("p50", "p90", "p99", "max")),
                    _share(e2e["reconstructor_cpu_utilisation"]),
                    _share(e2e["scorer_cpu_utilisation"]),
                )
            ],
        ),
        "",
        f"- Target reconstructor ≥ {PIPELINE_TARGETS['calls_per_s']:,} calls/s through Kafka: "
        f"{_verdict(rate_ok)} ({_num(rate, ' calls/s')}, the service using "
        f"{_share(rec['cpu_utilisation'])} of a core and waiting for one "
        f"{_share(rec.get('cpu_wait_share'))} of the time; "
        f"{_num(rec.get('per_core_s'), ' calls/s')} per core at its CPU cost per call).",
        f"- Target end-to-end p99 ≤ {PIPELINE_TARGETS['latency_p99_ms'] / 1000:g} s "
        f"(SessionEnded → Scored readable): {_verdict(p99_ok)} (p99 {_num(p99, ' ms')} at "
        f"{e2e['rate_achieved']} sessions/s, {e2e['missing']} missing).",
        "",
    ]
