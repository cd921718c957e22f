"""The sizing table of ``docs/scaling.md``: measured per-unit costs times a run's workload.

Every per-unit figure is read from ``bench/results.json`` (what ``rollstream bench`` measured on
this project's machines); the workload of a GPU is an explicit assumption (:class:`Workload`,
stated above the table). Regenerate after a benchmark run::

    python -m rollstream.dev.bench.sizing --write docs/scaling.md   # replace between the markers
    python -m rollstream.dev.bench.sizing --check docs/scaling.md   # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.docs_block import DocBlock

START = "<!-- sizing-table:start -->"
END = "<!-- sizing-table:end -->"
RESULTS = Path("bench/results.json")
GPU_COUNTS = (64, 512, 4096)
BLOCK = DocBlock(
    START, END, "the sizing table", "python -m rollstream.dev.bench.sizing --write docs/scaling.md"
)


@dataclass(frozen=True)
class Workload:
    """What one GPU of the run does: assumptions, not measurements (the doc states them)."""

    #: Output tokens a GPU streams per second (a small policy at high batch on one GPU).
    tokens_per_gpu_s: float = 3000.0
    #: Sessions open at once per GPU (each waits on tools most of the time).
    sessions_per_gpu: int = 32
    #: Output tokens per call (reasoning, text and tool calls).
    tokens_per_call: int = 400
    #: Calls per session (one SessionStarted and one SessionEnded each).
    calls_per_session: int = 30
    #: GPUs per rollout node (one node, one interceptor pool).
    gpus_per_node: int = 8
    #: Replicas of every topic.
    replication: int = 3
    #: Share of a core a unit may use in the plan (room for bursts and for a lost instance).
    headroom: float = 0.5
    #: Bytes/s a broker takes in (leader writes plus replica fetches), a planning figure for
    #: brokers on NVMe and 10 GbE; not measured here (this machine's 3 brokers share 2 cores).
    broker_ingress_bytes_s: float = 100e6


@dataclass(frozen=True)
class UnitCosts:
    """Per-unit costs read from the benchmark results."""

    proxy_cpu_us_per_token: float  # an interceptor worker, long streamed answers
    broker_bytes_per_call: float  # a CallRecord as written (delta + requests), compressed
    reconstructor_calls_per_core_s: float
    scorer_trajectories_per_core_s: float
    sources: dict[str, str]


def unit_costs(benchmarks: dict[str, Any]) -> UnitCosts:
    """The per-unit costs from ``results.json``'s ``benchmarks``."""
    stream = benchmarks["stream"]
    publisher = {e["encoding"]: e for e in benchmarks["publisher"]["throughput"]["encodings"]}
    written = publisher["delta_with_request"]
    pipeline = benchmarks["pipeline"]
    return UnitCosts(
        proxy_cpu_us_per_token=float(stream["rollstream_cpu_us_per_token"]),
        broker_bytes_per_call=float(written["log_bytes_per_record"]),
        reconstructor_calls_per_core_s=float(pipeline["reconstructor"]["per_core_s"]),
        scorer_trajectories_per_core_s=float(pipeline["scorer"]["per_core_s"]),
        sources={
            name: _when(result["machine"])
            for name, result in (
                ("stream", stream),
                ("publisher", benchmarks["publisher"]),
                ("pipeline", pipeline),
            )
        },
    )


def _when(machine: dict[str, Any]) -> str:
    """A run's date, and its machine's speed where recorded (``common.reference_loop_ms``).

    CPU figures from days when the shared machine ran at other speeds do not add up as they
    stand: the speed tells the reader by how much one of them is off.
    """
    speed = machine.get("reference_loop_ms")
    return str(machine["date"]) + (f" (reference loop {speed} ms)" if speed is not None else "")


@dataclass(frozen=True)
class Plan:
    """One run's size and what it needs."""

    gpus: int
    nodes: int
    sessions: int
    calls_s: float
    tokens_s: float
    records_s: float
    bytes_s: float
    workers_per_node: int
    partitions: int
    brokers: int
    reconstructors: int
    scorers: int


def plan(gpus: int, work: Workload, costs: UnitCosts) -> Plan:
    """What a run of ``gpus`` GPUs needs at the measured costs."""
    tokens_s = gpus * work.tokens_per_gpu_s
    calls_s = tokens_s / work.tokens_per_call
    sessions_s = calls_s / work.calls_per_session
    records_s = calls_s + 2 * sessions_s
    bytes_s = calls_s * costs.broker_bytes_per_call
    node_tokens_s = work.gpus_per_node * work.tokens_per_gpu_s
    worker_tokens_s = work.headroom * 1e6 / costs.proxy_cpu_us_per_token
    reconstructors = math.ceil(calls_s / (work.headroom * costs.reconstructor_calls_per_core_s))
    scorers = math.ceil(sessions_s / (work.headroom * costs.scorer_trajectories_per_core_s))
    # Partitions bound every consumer group's parallelism: a multiple of 6 above the largest.
    partitions = 6 * math.ceil(max(6, reconstructors, scorers) / 6)
    brokers = max(3, math.ceil(bytes_s * work.replication / work.broker_ingress_bytes_s))
    return Plan(
        gpus=gpus,
        nodes=math.ceil(gpus / work.gpus_per_node),
        sessions=gpus * work.sessions_per_gpu,
        calls_s=calls_s,
        tokens_s=tokens_s,
        records_s=records_s,
        bytes_s=bytes_s,
        workers_per_node=max(1, math.ceil(node_tokens_s / worker_tokens_s)),
        partitions=partitions,
        brokers=brokers,
        reconstructors=max(1, reconstructors),
        scorers=max(1, scorers),
    )


def _si(value: float, unit: str = "") -> str:
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.1f} {prefix}{unit}".rstrip()
    return f"{value:.0f} {unit}".rstrip()


def render(benchmarks: dict[str, Any], work: Workload | None = None) -> list[str]:
    """The assumptions, the measured costs and the table, as Markdown lines."""
    work = work or Workload()
    costs = unit_costs(benchmarks)
    plans = [plan(gpus, work, costs) for gpus in GPU_COUNTS]
    worker_tokens = 1e6 / costs.proxy_cpu_us_per_token
    lines = [
        "Measured per unit (`bench/results.json`; "
        + ", ".join(f"{name} {date}" for name, date in costs.sources.items())
        + "):",
        "",
        f"- an interceptor worker: {costs.proxy_cpu_us_per_token:.1f} µs of CPU per streamed "
        f"token, so {_si(worker_tokens)} tokens/s on a saturated core;",
        f"- a CallRecord on the broker: {costs.broker_bytes_per_call:,.0f} bytes (delta-encoded "
        "8,000-token prompts with the harness's request, zstd), before replication;",
        f"- a reconstructor: {costs.reconstructor_calls_per_core_s:,.0f} calls/s per core; a "
        f"scorer: {costs.scorer_trajectories_per_core_s:,.0f} trajectories/s per core "
        "(rollstream's own work: the evaluator's comes on top).",
        "",
        "Assumed per GPU: " + ", ".join(f"`{k}` = {v:g}" for k, v in asdict(work).items()) + ".",
        "",
        "| | " + " | ".join(f"{p.gpus:,} GPUs" for p in plans) + " |",
        "|---|" + "---:|" * len(plans),
    ]
    rows: list[tuple[str, list[str]]] = [
        ("rollout nodes", [f"{p.nodes:,}" for p in plans]),
        ("sessions open", [f"{p.sessions:,}" for p in plans]),
        ("calls/s", [f"{p.calls_s:,.0f}" for p in plans]),
        ("streamed tokens/s", [_si(p.tokens_s) for p in plans]),
        ("records/s into Kafka", [f"{p.records_s:,.0f}" for p in plans]),
        (
            "bytes/s into Kafka (x replicas)",
            [f"{_si(p.bytes_s, 'B/s')} (x{work.replication})" for p in plans],
        ),
        ("interceptor workers per node", [str(p.workers_per_node) for p in plans]),
        ("partitions (events, trajectories, scored)", [str(p.partitions) for p in plans]),
        ("brokers", [str(p.brokers) for p in plans]),
        ("reconstructor instances", [str(p.reconstructors) for p in plans]),
        ("scorer instances (rollstream's work only)", [str(p.scorers) for p in plans]),
    ]
    lines += [f"| {name} | " + " | ".join(values) + " |" for name, values in rows]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the sizing table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=RESULTS)
    BLOCK.add_arguments(parser)
    args = parser.parse_args(argv)
    lines = render(json.loads(args.results.read_text())["benchmarks"])
    return BLOCK.run(args, "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
