"""``rollstream bench instances``: reconstructor and scorer throughput with 1, 2, 3 instances.

For each instance count, on fresh topics of ``partitions`` partitions (a topic prefix of its
own), the services run as that many subprocesses in one consumer group, as they scale out:

- **Reconstructor**: the events of ``sessions`` synthetic sessions wait in an open
  transaction (:class:`Gate`); the instances start, and once the group is stable with every
  one of them holding partitions and idle, the transaction commits and they all read at once.
- **Scorer**: the same with the trajectories the first count's reconstructors made (each
  ``scorer_copies`` times under keys of its own), on an input topic of their own.

Every count gets the same input. A rate counts all of it over the time from the gate's
opening to the last output readable; each instance's CPU seconds over that span show what
bounds it when the cores run out.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.bench.common import process_cpu_seconds
from rollstream.dev.bench.instances_gate import (
    SCORER_INPUT,
    Gate,
    GroupWatch,
    count_topics,
    drop_topics,
    idle,
    wait_visible,
)
from rollstream.dev.bench.instances_report import with_scaling
from rollstream.dev.bench.pipeline_run import PipelineRun, ServiceProcess
from rollstream.dev.bench.pipeline_setup import (
    bench_group,
    input_shape,
    input_summary,
    reconstruct_args,
    score_args,
    session_load,
)
from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import AvroSerializer, TopicNames
from rollstream.schemas.trajectories import Trajectory
from rollstream.settings import KafkaSettings

Progress = Callable[[str], None]
Records = list[tuple[bytes, bytes]]


@dataclass(frozen=True)
class InstancesBenchConfig:
    """The sizes of one run."""

    instances: tuple[int, ...] = (1, 2, 3)
    # Reconstructor input: `sessions` sessions (copies of `pool` drawn ones) of `calls` calls,
    # prompts from 8,000 to 32,010 tokens, as in `bench pipeline`.
    sessions: int = 600
    pool: int = 10
    calls: int = 50
    system_tokens: int = 8000
    tool_result_tokens: int = 450
    completion_tokens: int = 40
    # Scorer input: every trajectory this many times (the scorer takes several hundred a
    # second: one copy would be over before the rate means anything).
    scorer_copies: int = 2
    partitions: int = 6
    strategy: str = "prefix_merge"
    evaluator: str = "session_completed"
    reconstructor_batch_records: int = 2000
    scorer_batch_records: int = 32
    # After the group is stable: at least this long, and until every instance is idle.
    settle_s: float = 1.0
    timeout_s: float = 300.0


def measure(
    services: list[ServiceProcess], opened: float, times: list[float], weights: list[int]
) -> dict[str, Any]:
    """Units/s from the gate's opening to the last output, in all and per instance; CPU each.

    The whole span counts, the first batch's work included: every instance starts at the
    gate, so a rate counted from the first output instead would credit the others with the
    work they did before it.
    """
    last = max(times)
    total = sum(weights)
    span = last - opened
    cpu = [service.cpu_between(opened, last) for service in services]
    waited = [service.waited_between(opened, last) for service in services]
    per_s = total / span if span > 0 and total else None
    return {
        "instances": len(services),
        "per_s": round(per_s) if per_s else None,
        "per_instance_s": round(per_s / len(services)) if per_s else None,
        "measured": total,
        "span_s": round(span, 3),
        "first_output_s": round(min(times) - opened, 3),
        "cpu_s": [round(c, 2) for c in cpu],
        "cpu_utilisation": [round(c / span, 3) if span > 0 else None for c in cpu],
        "cpu_wait_share": [round(w / span, 3) if span > 0 else None for w in waited],
        "cpu_ms_per_unit": round(sum(cpu) / total * 1000, 4) if total else None,
        "rss_mb": [round(service.peak_rss(last), 1) for service in services],
    }


async def _ready(
    run: PipelineRun, watch: GroupWatch, services: list[ServiceProcess], settle_s: float
) -> list[int]:
    """Until the group is stable with every instance, each idle; partitions per instance."""
    n = len(services)
    await run.wait_until(
        lambda: watch.stable_with(n),
        lambda: f"group {watch.group}: {watch.state}, {len(watch.members)} of {n} members",
    )
    await asyncio.sleep(settle_s)
    await run.wait_until(
        lambda: all(idle(s.samples) for s in services) and watch.stable_with(n),
        lambda: f"{n} instances of group {watch.group} not idle and stable",
    )
    return sorted(watch.mark().values(), reverse=True)


@dataclass(frozen=True)
class _Phase:
    """One service's part of a count: its input, its command line, when its output is in."""

    service: str
    topic: str
    records: Records
    args: Callable[[str], list[str]]  # the command line for a group
    done: Callable[[], bool]


@dataclass(frozen=True)
class _Where:
    """What every phase reports to, and the broker processes whose CPU it notes."""

    progress: Progress
    broker_pids: tuple[int, ...]


@dataclass(frozen=True)
class _Started:
    """The instances of one phase: partitions each, rebalances seen, when the gate opened.

    ``others`` is the cores the broker (None: not measured) and this process (the reader and
    the gate) used from the gate's opening until the output was all in.
    """

    services: list[ServiceProcess]
    partitions: list[int]
    rebalanced: int
    opened: float
    others: dict[str, float | None]


def _cpu(pids: tuple[int, ...]) -> tuple[float, float | None]:
    """CPU seconds so far of this process, and the sum of ``pids``' (None without pids)."""
    brokers = sum(process_cpu_seconds(pid) for pid in pids) if pids else None
    return time.process_time(), brokers


async def _gated(
    run: PipelineRun,
    phase: _Phase,
    n: int,
    settle_s: float,
    where: _Where,
) -> _Started:
    """``n`` instances behind a gate on the phase's input; the gate opened once they are ready."""
    group = bench_group(run.kafka, phase.service)
    began = time.perf_counter()
    async with Gate(run.kafka, f"{group}-gate") as gate:
        await gate.fill(phase.topic, phase.records)
        filled = time.perf_counter()
        args = phase.args(group)
        services = [run.start_service(f"{phase.service}-{i + 1}", *args) for i in range(n)]
        async with GroupWatch(run.kafka, group) as watch:
            partitions = await _ready(run, watch, services, settle_s)
            before = _cpu(where.broker_pids)
            opened = await gate.open()
            await run.wait_until(
                phase.done, lambda: f"{phase.service}: output of {n} instances incomplete"
            )
            after, span = _cpu(where.broker_pids), time.perf_counter() - opened
            others = {
                "reader_cores": round((after[0] - before[0]) / span, 3),
                "broker_cores": None
                if after[1] is None or before[1] is None
                else round((after[1] - before[1]) / span, 3),
            }
            where.progress(
                f"    {phase.service}: input written in {filled - began:.1f} s, {n} instance(s) "
                f"ready {opened - filled:.1f} s later, done {time.perf_counter() - opened:.1f} s "
                "after the gate opened"
            )
            return _Started(services, partitions, watch.rebalanced, opened, others)


async def _one_count(
    config: InstancesBenchConfig,
    kafka: KafkaSettings,
    n: int,
    events: Records,
    scorer_input: Records | None,
    log_dir: Path,
    where: _Where,
) -> tuple[dict[str, Any], dict[str, Any], Records]:
    """Both services with ``n`` instances; the scorer's input made from the trajectories."""
    names = TopicNames(kafka.topic_prefix)
    serializer = AvroSerializer()
    async with PipelineRun(kafka, log_dir, config.timeout_s) as run:
        run.scored.keep_values = False  # only counted; each carries its whole trajectory
        recon_phase = _Phase(
            "reconstruct",
            names.events,
            events,
            lambda group: reconstruct_args(config, group),
            lambda: run.trajectories.count("tp-") >= config.sessions,
        )
        started = await _gated(run, recon_phase, n, config.settle_s, where)
        times, values = run.trajectories.take()
        trajectories = [serializer.decode_as(v, Trajectory) for v in values]
        recon = measure(
            started.services, started.opened, times, [t.stats.calls for t in trajectories]
        )
        recon |= {
            "partitions": started.partitions,
            "rebalanced": started.rebalanced,
            **started.others,
            "statuses": dict(Counter(t.status.value for t in trajectories)),
            "duplicates": run.trajectories.duplicates("tp-"),
        }
        run.stop_services()
        if scorer_input is None:
            scorer_input = [
                (f"{t.group_id}#{k}".encode(), v)
                for k in range(config.scorer_copies)
                for t, v in zip(trajectories, values, strict=True)
            ]
        expected = len(scorer_input)
        score_phase = _Phase(
            "score",
            names.resolve(SCORER_INPUT),
            scorer_input,
            lambda group: score_args(config, group, "--input", SCORER_INPUT),
            lambda: len(run.scored.times) >= expected,
        )
        started = await _gated(run, score_phase, n, config.settle_s, where)
        times, _ = run.scored.take()
        score = measure(started.services, started.opened, times, [1] * len(times))
        score |= {
            "partitions": started.partitions,
            "rebalanced": started.rebalanced,
            **started.others,
            "duplicates": len(times) - expected,
        }
    return recon, score, scorer_input


async def _count_with_topics(
    config: InstancesBenchConfig,
    kafka: KafkaSettings,
    n: int,
    events: Records,
    scorer_input: Records | None,
    log_dir: Path,
    where: _Where,
) -> tuple[dict[str, Any], dict[str, Any], Records]:
    """One count on topics of its own under ``<topic_prefix>-n<count>``, deleted after it."""
    count_kafka = kafka.model_copy(update={"topic_prefix": f"{kafka.topic_prefix}-n{n}"})
    specs = count_topics(count_kafka.topic_prefix, config.partitions)
    async with TopicAdmin(count_kafka) as admin:
        await admin.create(specs)
    try:
        await wait_visible(count_kafka, specs, config.timeout_s)
        return await _one_count(config, count_kafka, n, events, scorer_input, log_dir, where)
    finally:
        await drop_topics(count_kafka, specs)


async def run_instances_bench(
    config: InstancesBenchConfig,
    kafka: KafkaSettings,
    progress: Progress = print,
    broker_pids: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Every instance count in turn, on the same input; topics under ``kafka.topic_prefix``.

    ``broker_pids``: the broker's processes, when they run on this machine, for their CPU.
    """
    where = _Where(progress, broker_pids)
    events = [
        (sid.encode(), value)
        for sid, values in session_load("tp", config.sessions, config.pool, input_shape(config))
        for value in values
    ]
    recon: list[dict[str, Any]] = []
    score: list[dict[str, Any]] = []
    scorer_input: Records | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in config.instances:
            began = time.monotonic()
            (Path(tmp) / f"n{n}").mkdir()
            r, s, scorer_input = await _count_with_topics(
                config, kafka, n, events, scorer_input, Path(tmp) / f"n{n}", where
            )
            recon.append(r)
            score.append(s)
            progress(
                f"  {n} instance(s): reconstructor {r['per_s']} calls/s ({r['per_instance_s']} "
                f"per instance), scorer {s['per_s']} trajectories/s ({s['per_instance_s']} per "
                f"instance); {time.monotonic() - began:.0f} s"
            )
    return {
        "config": asdict(config),
        "services": "subprocesses",
        "reconstructor": {**input_summary(config), "counts": with_scaling(recon)},
        "scorer": {
            "trajectories": len(scorer_input or []),
            "copies": config.scorer_copies,
            "counts": with_scaling(score),
        },
    }
