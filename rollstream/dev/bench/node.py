"""``rollstream bench node``: sessions/minute of one NodeScheduler, with and without pre-warming.

``prewarm=0`` against ``prewarm=N`` (and the local runtime against docker's), alternating; each
round submits one ``command``-harness task to a fresh scheduler, with no Kafka and no
interceptor. The scheduler's meter gives stage times, peaks and run-slot use (see the section).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.bench.backend import round_ratios
from rollstream.dev.bench.common import percentile
from rollstream.dev.bench.runner import Sample, median_of, run_rounds
from rollstream.producers.node.pool import NodeScheduler, StageSpan
from rollstream.producers.node.session import SessionRecord, SessionRunner
from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox.harnesses.executables import resolve_executable
from rollstream.sandbox.runtime import LocalRuntime, Runtime
from rollstream.schemas.base import utcnow
from rollstream.schemas.sessions import SessionEnded, SessionStatus
from rollstream.schemas.tasks import Task, Workspace, WorkspaceKind

#: The two modes: without pre-warming, then with ``NodeBenchConfig.prewarm``.
MODES = ("no_prewarm", "prewarm")
STAGES = ("init", "ready", "run", "post")


@dataclass(frozen=True)
class NodeBenchConfig:
    """The sizes of one run."""

    sessions: int = 32
    rounds: int = 3
    max_init: int = 4
    max_run: int = 4
    max_post: int = 4
    prewarm: int = 4
    setup_s: float = 0.5
    run_s: float = 0.5
    files: int = 5
    file_bytes: int = 2000
    runtimes: tuple[str, ...] = ("local",)
    image: str = "rollstream-base:trixie"
    #: Containers (and directories) started and removed one at a time for the start cost.
    start_probes: int = 5


def bench_task(config: NodeBenchConfig, task_id: str) -> Task:
    """The benchmark's task: inline files, a sleeping setup, a sleeping ``command`` harness."""
    line = "x" * 63 + "\n"
    body = line * max(1, config.file_bytes // len(line))
    files = {f"src/file_{i}.txt": body for i in range(config.files)}
    return Task(
        task_id=task_id,
        group_id=task_id,
        instruction="Write done into out.txt.",
        samples=config.sessions,
        harness="command",
        workspace=Workspace(kind=WorkspaceKind.INLINE, files=files),
        setup=[f"sleep {config.setup_s:g}"],
        init_timeout_s=60 + 10 * config.setup_s,
        agent_timeout_s=60 + 10 * config.run_s,
        submitted_at=utcnow(),
        metadata={"harness.command": f"sleep {config.run_s:g}; echo done > out.txt"},
    )


def slots_peak(spans: list[StageSpan]) -> int:
    """The most sessions at once between their init's start and their run's end."""
    held: dict[str, list[float]] = {}
    for span in spans:
        if span.stage in ("init", "run"):
            edge = held.setdefault(span.session_id, [span.start, span.end])
            edge[0], edge[1] = min(edge[0], span.start), max(edge[1], span.end)
    edges = sorted((t, d) for start, end in held.values() for t, d in ((start, 1), (end, -1)))
    most = current = 0
    for _, delta in edges:  # an end sorts before a start at the same instant
        current += delta
        most = max(most, current)
    return most


def run_slot_use(spans: list[StageSpan], max_run: int) -> tuple[float, float]:
    """The run pool's idle and starved shares, from the first run's start to the last's end.

    Idle: run-slot time with no harness running. Starved: the part of it while sessions were
    still waiting to run (queued, in init, or ready) — at most as many slots as such sessions;
    idle time at the end of the batch, when nothing is left to run, is not starvation.
    """
    runs = sorted((s.start, s.end) for s in spans if s.stage == "run")
    if not runs:
        return 0.0, 0.0
    first, last = runs[0][0], max(end for _, end in runs)
    window = last - first
    if window <= 0:
        return 0.0, 0.0
    # +1 at a run's start, -1 at its end; still to start = runs whose start is later.
    events = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    running = idle = starved = 0.0
    started = 0
    previous = first
    for t, delta in events:
        free = max_run - running
        waiting = len(runs) - started
        idle += free * (t - previous)
        starved += min(free, waiting) * (t - previous)
        previous = t
        running += delta
        started += delta > 0
    capacity = max_run * window
    return idle / capacity, starved / capacity


def _mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 3) if values else 0.0


async def _no_calls(session_id: str) -> int:
    return 0


def _runtime(config: NodeBenchConfig, name: str, work_root: Path, prewarm: int) -> Runtime:
    if name == "docker":
        from rollstream.sandbox.docker import DockerRuntime  # the SDK only when asked

        return DockerRuntime(config.image, work_root, prewarm=prewarm)
    return LocalRuntime(work_root)


async def start_cost(config: NodeBenchConfig, name: str, work_root: Path) -> dict[str, Any]:
    """Median and max milliseconds of one sandbox's start and its removal, one at a time."""
    runtime = _runtime(config, name, work_root, prewarm=0)
    starts, stops = [], []
    try:
        for i in range(config.start_probes):
            began = time.perf_counter()
            sandbox = await runtime.start(f"probe-{i}")
            started = time.perf_counter()
            await runtime.stop(sandbox)
            starts.append((started - began) * 1000)
            stops.append((time.perf_counter() - started) * 1000)
    finally:
        await runtime.close()
    cost: dict[str, Any] = {"runtime": name, "probes": len(starts)}
    for key, times in (("start_ms", starts), ("stop_ms", stops)):
        cost |= {key: round(statistics.median(times), 1), f"{key}_max": round(max(times), 1)}
    return cost


async def run_round(
    config: NodeBenchConfig, prewarm: int, work_root: Path, task_id: str, runtime_name: str
) -> dict[str, Any]:
    """One batch of ``config.sessions`` through a fresh scheduler with ``prewarm``."""
    settings = NodeSettings(
        max_init=config.max_init,
        max_run=config.max_run,
        max_post=config.max_post,
        prewarm=prewarm,
        work_root=work_root,
        node_id="bench",
    )
    records: list[SessionRecord] = []

    async def emit(record: SessionRecord) -> None:
        records.append(record)

    runtime = _runtime(config, runtime_name, work_root, prewarm)
    runner = SessionRunner(
        settings,
        runtime,
        emit,
        _no_calls,
        executable=lambda name: resolve_executable(name, work_root),
    )
    task = bench_task(config, task_id)
    try:
        await runtime.fill()
        async with NodeScheduler(runner) as scheduler:
            began = time.monotonic()
            scheduler.submit(task)
            sessions = await scheduler.join(task.task_id)
            wall = time.monotonic() - began
            spans = list(scheduler.meter.spans)
            peak = scheduler.concurrency
    finally:
        await runtime.close()
    ended = [r for r in records if isinstance(r, SessionEnded)]
    completed = sum(1 for e in ended if e.status is SessionStatus.COMPLETED)
    by_session: dict[str, dict[str, StageSpan]] = {}
    for span in spans:
        by_session.setdefault(span.session_id, {})[span.stage] = span
    each = by_session.values()
    latencies = [s["post"].end - s["init"].start for s in each if {"init", "post"} <= s.keys()]
    stage_mean = {
        stage: _mean([s[stage].end - s[stage].start for s in each if stage in s])
        for stage in ("init", "run", "post")
    }
    stage_mean["ready"] = _mean([s["run"].start - s["init"].end for s in each if "run" in s])
    idle, starved = run_slot_use(spans, config.max_run)
    return {
        "prewarm": prewarm,
        "sessions": len(sessions),
        "completed": completed,
        "errors": len(sessions) - completed,
        "wall_s": round(wall, 3),
        "sessions_per_min": round(len(sessions) / wall * 60, 1),
        "latencies_s": latencies,
        "stage_mean_s": stage_mean,
        "peak": peak,
        "slots_peak": slots_peak(spans),
        "run_idle_share": round(idle, 3),
        "run_starved_share": round(starved, 3),
    }


def _summary(run: str, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A mode over the rounds: medians of per-round figures, latencies pooled, peaks the max."""
    runtime, mode = run.split()
    rates = [r["sessions_per_min"] for r in runs]
    latencies = [t for r in runs for t in r["latencies_s"]]
    stages = [r["stage_mean_s"] for r in runs]
    return {
        "mode": mode,
        "runtime": runtime,
        "prewarm": runs[0]["prewarm"],
        "rounds": len(runs),
        **{key: sum(r[key] for r in runs) for key in ("sessions", "completed", "errors")},
        "sessions_per_min": median_of(runs, "sessions_per_min", 1),
        "sessions_per_min_range": [min(rates), max(rates)],
        "wall_s": median_of(runs, "wall_s"),
        "latency_mean_s": round(statistics.fmean(latencies), 3) if latencies else None,
        "latency_p50_s": round(percentile(latencies, 50), 3) if latencies else None,
        "latency_p99_s": round(percentile(latencies, 99), 3) if latencies else None,
        "stage_mean_s": {stage: median_of(stages, stage, 3) for stage in STAGES},
        "peak": {stage: max(r["peak"][stage] for r in runs) for stage in STAGES},
        "slots_peak": max(r["slots_peak"] for r in runs),
        "run_idle_share": median_of(runs, "run_idle_share", 3),
        "run_starved_share": median_of(runs, "run_starved_share", 3),
    }


def steady_bound(config: NodeBenchConfig, mode: dict[str, Any]) -> float:
    """Sessions/minute a long steady stream would reach with this mode's measured stage times.

    Each of the ``max_run + prewarm`` slots is held from init's start to run's end; the init and
    run pools bound their own stages.
    """
    stage = mode["stage_mean_s"]
    init, run = float(stage["init"]), float(stage["run"])
    if init <= 0 or run <= 0:
        return 0.0
    slots = (config.max_run + int(mode["prewarm"])) / (init + run)
    return round(60 * min(config.max_init / init, config.max_run / run, slots), 1)


async def run_node_bench(
    config: NodeBenchConfig,
    progress: Callable[[str], Any] = print,
    work_root: Path | None = None,
) -> dict[str, Any]:
    """Alternate the modes (and runtimes) for ``config.rounds`` rounds; returns the results."""
    prewarm_of = {"no_prewarm": 0, "prewarm": config.prewarm}
    runs = [f"{runtime} {mode}" for runtime in config.runtimes for mode in MODES]
    with tempfile.TemporaryDirectory(prefix="rollstream-bench-node-", dir=work_root) as tmp:
        starts = [await start_cost(config, name, Path(tmp)) for name in config.runtimes]
        for cost in starts:
            progress(
                f"  {cost['runtime']}: a sandbox starts in {cost['start_ms']} ms, "
                f"is removed in {cost['stop_ms']} ms (median of {cost['probes']})"
            )

        async def measure(run: str, round_: int) -> Sample:
            runtime, mode = run.split()
            task_id = f"bench-{runtime}-{mode}-{round_}"
            return await run_round(config, prewarm_of[mode], Path(tmp), task_id, runtime)

        def describe(r: Mapping[str, Any]) -> str:
            return (
                f"{r['sessions_per_min']:>6} sessions/min, wall {r['wall_s']} s, latency p50 "
                f"{percentile(r['latencies_s'], 50):.2f} s, run slots starved "
                f"{r['run_starved_share']:.0%}, {r['errors']} errors"
            )

        samples = await run_rounds(runs, config.rounds, measure, progress, describe)
    modes = [_summary(run, samples[run]) for run in runs]
    for mode_summary in modes:
        mode_summary["bound_per_min"] = steady_bound(config, mode_summary)
    by_runtime = {}
    for name in config.runtimes:
        ratio = round_ratios(
            samples[f"{name} prewarm"], samples[f"{name} no_prewarm"], "sessions_per_min"
        )
        by_runtime[name] = dict(zip(("speedup", "speedup_range"), ratio, strict=True))
    first = config.runtimes[0]
    return {
        "config": asdict(config),
        "modes": modes,
        "start_cost": starts,
        # The first runtime's, as results before the docker runtime had them.
        "bound_per_min": {m["mode"]: m["bound_per_min"] for m in modes if m["runtime"] == first},
        **by_runtime[first],
        "by_runtime": by_runtime,
    }
