"""``rollstream bench node``: sessions/minute of one NodeScheduler, with and without pre-warming.

One run, two settings of the same node, alternating: ``prewarm=0`` (a session's init starts only
when a run slot is free, so each run slot carries init and run one after the other) and
``prewarm=N`` (init prepares up to N sessions beyond the running ones). Each round submits the
same ``command``-harness task with ``sessions`` samples to a fresh scheduler and waits for every
SessionEnded. Init costs real time: the local runtime's directory, an inline workspace of a few
files, a setup command that sleeps, the git baseline; the harness sleeps a comparable time and
writes a file, so post-run has a diff to take.

``emit`` and ``calls_of`` are local callables (no Kafka, no interceptor): the numbers are the
node's own scheduling and process work on this machine, not a model's.

With ``runtimes=("local", "docker")`` both modes also run on the docker runtime, interleaved with
the local ones in the same rounds: each session in a container of ``image`` (its pre-warmed
pool filled before the round's clock starts, as on a node that has been up a while), and the
cost of one container's start and removal is measured on its own beside a local directory's.

From the scheduler's meter (its stage spans and peak counters) each round gives: wall time from
submit to the last SessionEnded (sessions/minute), per-session latency from the start of its
init to the end of its post-run (its time on the node; the intake queue a burst waits in is not
counted), the mean time in each stage and waiting ready, the peak number of sessions in each
stage and holding a slot, and how much of the run pool's capacity sat idle while sessions were
still waiting to run (the run pool waiting for an init it could have had ready).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.bench.common import abba, percentile
from rollstream.producers.node.pool import NodeScheduler, StageSpan
from rollstream.producers.node.session import Emit, SessionRecord, SessionRunner
from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox.harnesses.presets import resolve_executable
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


@dataclass(frozen=True)
class RoundResult:
    """One mode's figures in one round."""

    mode: str
    runtime: str
    prewarm: int
    sessions: int
    completed: int
    errors: int
    wall_s: float
    sessions_per_min: float
    latencies_s: list[float]
    stage_mean_s: dict[str, float]
    peak: dict[str, int]
    slots_peak: int
    run_idle_share: float
    run_starved_share: float


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


def _collector() -> tuple[list[SessionRecord], Emit]:
    records: list[SessionRecord] = []

    async def emit(record: SessionRecord) -> None:
        records.append(record)

    return records, emit


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
    return {
        "runtime": name,
        "probes": len(starts),
        "start_ms": round(statistics.median(starts), 1),
        "start_ms_max": round(max(starts), 1),
        "stop_ms": round(statistics.median(stops), 1),
        "stop_ms_max": round(max(stops), 1),
    }


async def run_round(
    config: NodeBenchConfig,
    mode: str,
    prewarm: int,
    work_root: Path,
    task_id: str,
    runtime_name: str = "local",
) -> RoundResult:
    """One batch of ``config.sessions`` through a fresh scheduler with ``prewarm``."""
    settings = NodeSettings(
        max_init=config.max_init,
        max_run=config.max_run,
        max_post=config.max_post,
        prewarm=prewarm,
        work_root=work_root,
        node_id="bench",
    )
    records, emit = _collector()
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
    latencies = [
        s["post"].end - s["init"].start for s in by_session.values() if "init" in s and "post" in s
    ]
    stage_mean: dict[str, float] = {}
    for stage in ("init", "run", "post"):
        times = [s[stage].end - s[stage].start for s in by_session.values() if stage in s]
        stage_mean[stage] = round(statistics.fmean(times), 3) if times else 0.0
    ready = [s["run"].start - s["init"].end for s in by_session.values() if "run" in s]
    stage_mean["ready"] = round(statistics.fmean(ready), 3) if ready else 0.0
    idle, starved = run_slot_use(spans, config.max_run)
    return RoundResult(
        mode=mode,
        runtime=runtime_name,
        prewarm=prewarm,
        sessions=len(sessions),
        completed=completed,
        errors=len(sessions) - completed,
        wall_s=round(wall, 3),
        sessions_per_min=round(len(sessions) / wall * 60, 1),
        latencies_s=latencies,
        stage_mean_s=stage_mean,
        peak=peak,
        slots_peak=slots_peak(spans),
        run_idle_share=round(idle, 3),
        run_starved_share=round(starved, 3),
    )


def _summary(results: list[RoundResult]) -> dict[str, Any]:
    """A mode over the rounds: medians of per-round figures, latencies pooled, peaks the max."""
    rates = [r.sessions_per_min for r in results]
    latencies = [t for r in results for t in r.latencies_s]
    return {
        "mode": results[0].mode,
        "runtime": results[0].runtime,
        "prewarm": results[0].prewarm,
        "rounds": len(results),
        "sessions": sum(r.sessions for r in results),
        "completed": sum(r.completed for r in results),
        "errors": sum(r.errors for r in results),
        "sessions_per_min": round(statistics.median(rates), 1),
        "sessions_per_min_range": [min(rates), max(rates)],
        "wall_s": round(statistics.median(r.wall_s for r in results), 2),
        "latency_mean_s": round(statistics.fmean(latencies), 3) if latencies else None,
        "latency_p50_s": round(percentile(latencies, 50), 3) if latencies else None,
        "latency_p99_s": round(percentile(latencies, 99), 3) if latencies else None,
        "stage_mean_s": {
            stage: round(statistics.median(r.stage_mean_s[stage] for r in results), 3)
            for stage in STAGES
        },
        "peak": {stage: max(r.peak[stage] for r in results) for stage in STAGES},
        "slots_peak": max(r.slots_peak for r in results),
        "run_idle_share": round(statistics.median(r.run_idle_share for r in results), 3),
        "run_starved_share": round(statistics.median(r.run_starved_share for r in results), 3),
    }


def steady_bound(config: NodeBenchConfig, mode: dict[str, Any]) -> float:
    """Sessions/minute a long steady stream would reach with this mode's measured stage times.

    Each of the ``max_run + prewarm`` slots is held from init's start to run's end; the init and
    run pools bound their own stages. Without pre-warming the slots are the bound (init and run
    in series per run slot); with it, usually the slower of the init and run pools. A burst of
    ``sessions`` stays below it by its start (the first inits, nothing to run yet) and its tail.
    """
    stage = mode["stage_mean_s"]
    init, run = float(stage["init"]), float(stage["run"])
    if init <= 0 or run <= 0:
        return 0.0
    slots = (config.max_run + int(mode["prewarm"])) / (init + run)
    return round(60 * min(config.max_init / init, config.max_run / run, slots), 1)


def _speedup(warm: list[RoundResult], cold: list[RoundResult]) -> dict[str, Any]:
    """Pre-warmed over cold sessions/min, round by round: the median and the range."""
    ratios = sorted(
        w.sessions_per_min / c.sessions_per_min
        for w, c in zip(warm, cold, strict=True)
        if c.sessions_per_min
    )
    if not ratios:
        return {"speedup": None, "speedup_range": None}
    return {
        "speedup": round(statistics.median(ratios), 2),
        "speedup_range": [round(ratios[0], 2), round(ratios[-1], 2)],
    }


async def run_node_bench(
    config: NodeBenchConfig,
    progress: Callable[[str], Any] = print,
    work_root: Path | None = None,
) -> dict[str, Any]:
    """Alternate the modes (and runtimes) for ``config.rounds`` rounds; returns the results."""
    prewarm_of = {"no_prewarm": 0, "prewarm": config.prewarm}
    runs = [(runtime, mode) for runtime in config.runtimes for mode in MODES]
    rounds: dict[tuple[str, str], list[RoundResult]] = {run: [] for run in runs}
    with tempfile.TemporaryDirectory(prefix="rollstream-bench-node-", dir=work_root) as tmp:
        starts = [await start_cost(config, name, Path(tmp)) for name in config.runtimes]
        for cost in starts:
            progress(
                f"  {cost['runtime']}: a sandbox starts in {cost['start_ms']} ms, "
                f"is removed in {cost['stop_ms']} ms (median of {cost['probes']})"
            )
        for round_ in range(config.rounds):
            for runtime, mode in abba(runs, round_):
                result = await run_round(
                    config,
                    mode,
                    prewarm_of[mode],
                    Path(tmp),
                    f"bench-{runtime}-{mode}-{round_}",
                    runtime,
                )
                progress(
                    f"  round {round_ + 1} {runtime:<6} prewarm={result.prewarm:<2} "
                    f"{result.sessions_per_min:>6} sessions/min, wall {result.wall_s} s, "
                    f"latency p50 {percentile(result.latencies_s, 50):.2f} s, "
                    f"run slots starved {result.run_starved_share:.0%}, "
                    f"{result.errors} errors"
                )
                rounds[(runtime, mode)].append(result)
    modes = [_summary(rounds[run]) for run in runs]
    by_runtime = {
        name: _speedup(rounds[(name, "prewarm")], rounds[(name, "no_prewarm")])
        for name in config.runtimes
    }
    for mode_summary in modes:
        mode_summary["bound_per_min"] = steady_bound(config, mode_summary)
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
