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

import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.bench.instances_gate import (
    SCORER_INPUT,
    Phase,
    Records,
    count_topics,
    drop_topics,
    gated,
    measure,
    wait_visible,
)
from rollstream.dev.bench.pipeline_run import (
    PipelineRun,
    input_shape,
    input_summary,
    reconstruct_args,
    score_args,
    session_load,
)
from rollstream.dev.bench.runner import table
from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import AvroSerializer, TopicNames
from rollstream.schemas.trajectories import Trajectory
from rollstream.settings import KafkaSettings

Progress = Callable[[str], None]


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


async def _one_count(
    config: InstancesBenchConfig,
    kafka: KafkaSettings,
    n: int,
    events: Records,
    scorer_input: Records | None,
    log_dir: Path,
    progress: Progress,
    broker_pids: tuple[int, ...],
) -> tuple[dict[str, Any], dict[str, Any], Records]:
    """Both services with ``n`` instances; the scorer's input made from the trajectories."""
    names = TopicNames(kafka.topic_prefix)
    serializer = AvroSerializer()
    async with PipelineRun(kafka, log_dir, config.timeout_s) as run:
        run.scored.keep_values = False  # only counted; each carries its whole trajectory
        recon_phase = Phase(
            "reconstruct",
            names.events,
            events,
            lambda group: reconstruct_args(config, group),
            lambda: run.trajectories.count("tp-") >= config.sessions,
        )
        services, opened, extra = await gated(
            run, recon_phase, n, config.settle_s, progress, broker_pids
        )
        times, values = run.trajectories.take()
        trajectories = [serializer.decode_as(v, Trajectory) for v in values]
        recon = measure(services, opened, times, [t.stats.calls for t in trajectories]) | {
            **extra,
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
        score_phase = Phase(
            "score",
            names.resolve(SCORER_INPUT),
            scorer_input,
            lambda group: score_args(config, group, "--input", SCORER_INPUT),
            lambda: len(run.scored.times) >= expected,
        )
        services, opened, extra = await gated(
            run, score_phase, n, config.settle_s, progress, broker_pids
        )
        times, _ = run.scored.take()
        score = measure(services, opened, times, [1] * len(times)) | {
            **extra,
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
    progress: Progress,
    broker_pids: tuple[int, ...],
) -> tuple[dict[str, Any], dict[str, Any], Records]:
    """One count on topics of its own under ``<topic_prefix>-n<count>``, deleted after it."""
    count_kafka = kafka.model_copy(update={"topic_prefix": f"{kafka.topic_prefix}-n{n}"})
    specs = count_topics(count_kafka.topic_prefix, config.partitions)
    async with TopicAdmin(count_kafka) as admin:
        await admin.create(specs)
    try:
        await wait_visible(count_kafka, specs, config.timeout_s)
        return await _one_count(
            config, count_kafka, n, events, scorer_input, log_dir, progress, broker_pids
        )
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
                config, kafka, n, events, scorer_input, Path(tmp) / f"n{n}", progress, broker_pids
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


Result = dict[str, Any]

#: Per instance within this share of one instance's rate: the line counts as flat.
FLAT = 0.85


def with_scaling(counts: list[Result]) -> list[Result]:
    """Each count with its speed-up over the smallest count, per-instance efficiency, cores.

    ``efficiency`` is the per-instance rate over the smallest count's per-instance rate (1.0:
    a flat per-instance line); ``cores`` the CPU the instances used in all, in cores.
    """
    if not counts:
        return []
    base = min(counts, key=lambda c: c["instances"])
    base_per_instance = (base["per_s"] or 0) / base["instances"]
    out = []
    for count in counts:
        rate = count["per_s"]
        usable = rate is not None and base_per_instance > 0
        out.append(
            count
            | {
                "speedup": round(rate / base["per_s"], 2) if usable else None,
                "efficiency": round(rate / (count["instances"] * base_per_instance), 2)
                if usable
                else None,
                "cores": round(sum(u for u in count["cpu_utilisation"] if u is not None), 2),
            }
        )
    return out


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,}{unit}"


def _list(values: list[Any], fmt: str = "{}") -> str:
    return " / ".join("n/a" if v is None else fmt.format(v) for v in values)


def _table(counts: list[Result], unit: str) -> list[str]:
    header = [
        "instances",
        "partitions each",
        f"{unit}/s in all",
        "per instance",
        "x per instance of 1",
        "CPU s per instance (share of a core)",
        "waiting for a CPU",
        "CPU ms per unit",
        "cores: instances / broker / reader",
        "measured over (first output)",
        "rebalances / duplicates",
    ]
    rows = [
        (
            c["instances"],
            _list(c["partitions"]),
            _num(c["per_s"]),
            _num(c["per_instance_s"]),
            _num(c["efficiency"]),
            f"{_list(c['cpu_s'])} ({_list(c['cpu_utilisation'], '{:.0%}')})",
            _list(c["cpu_wait_share"], "{:.0%}"),
            _num(c["cpu_ms_per_unit"]),
            f"{c['cores']} / {_num(c.get('broker_cores'))} / {_num(c.get('reader_cores'))}",
            f"{c['measured']:,} in {c['span_s']} s ({c.get('first_output_s', '?')} s)",
            f"{c['rebalanced']} / {c['duplicates']}",
        )
        for c in counts
    ]
    return table(header, "rlrrrllrlll", rows)


def bound_line(name: str, counts: list[Result], cores: object) -> str:
    """Whether the per-instance line stays flat, and if not what the CPU figures say bounds it."""
    last = max(counts, key=lambda c: c["instances"])
    first = min(counts, key=lambda c: c["instances"])
    if last["efficiency"] is None or last is first:
        return f"- {name}: too few counts or rates to compare."
    wait = max((w for w in last["cpu_wait_share"] if w is not None), default=0.0)
    text = (
        f"- {name}: per instance {last['efficiency']} x one instance's rate at "
        f"{last['instances']} instances (in all {last['speedup']} x)"
    )
    if last["efficiency"] >= FLAT:
        return text + ": flat."
    others = (last.get("broker_cores") or 0.0) + (last.get("reader_cores") or 0.0)
    total = last["cores"] + others
    busy = isinstance(cores, int) and total >= 0.75 * cores
    cost = (
        f"CPU per unit {_num(first['cpu_ms_per_unit'])} ms with one instance, "
        f"{_num(last['cpu_ms_per_unit'])} ms with {last['instances']}"
    )
    broker = last.get("broker_cores")
    used = (
        f"the {last['instances']} instances used {last['cores']} cores, the broker "
        f"{'(not measured)' if broker is None else broker} and the reader "
        f"{_num(last.get('reader_cores'))}: {total:.2f} of the machine's {cores}"
    )
    if busy or wait >= 0.2:
        # Cores waited for but not used by what is measured went to other processes.
        rest = "" if busy else " (the rest went to other processes)"
        return text + (
            f": bounded by cores. In all {used}{rest}; each instance waited for a CPU up to "
            f"{wait:.0%} of the time ({cost}): more instances than free cores split the same "
            "cores."
        )
    return text + (
        f": not bounded by cores ({used}, at most {wait:.0%} waiting for a CPU; {cost}): the "
        "instances wait on Kafka (fetches, transaction commits)."
    )


def instances_section(result: Result) -> list[str]:
    """Both services' rates at each instance count, per instance, and what bounds them."""
    config, rec, sco = result["config"], result["reconstructor"], result["scorer"]
    cores = result.get("machine", {}).get("cores", "?")
    counts = ", ".join(str(n) for n in config["instances"])
    return [
        "## Reconstructor and scorer with more instances (`rollstream bench instances`)",
        "",
        f"The reconstructor (`--strategy {config['strategy']}`) and the scorer (evaluator "
        f"`{config['evaluator']}`) as {counts} instances (subprocesses in one consumer group) "
        f"on fresh {config['partitions']}-partition topics of the local broker, each count on "
        "the same input: the events of "
        f"{rec['sessions']} sessions of {config['calls']} calls (prompts up to "
        f"{rec['prompt_tokens_last']:,} tokens), then the trajectories the first count made, "
        f"{sco.get('copies', 1)} times each ({sco['trajectories']:,} records). The input waits "
        "in an open transaction until the group is stable with every instance holding "
        "partitions and idle, then commits, so all instances start on it at once. A rate counts "
        "all of the input over the time from that commit to the last output readable (the "
        "first batch's work included; the first output came after the time in brackets); per "
        "instance: that over the count. CPU: each instance's CPU seconds over the same span, "
        "and the time it was runnable but "
        "waiting for a core (/proc schedstat); the broker's (its JVM, when `rollstream kafka "
        "start` runs it on this machine) and this process's (the reader and the gate) over "
        f"the same span, in cores: all of them share the machine's {cores} cores.",
        "",
        "Reconstructor (calls):",
        "",
        *_table(rec["counts"], "calls"),
        "",
        "Scorer (trajectories):",
        "",
        *_table(sco["counts"], "trajectories"),
        "",
        bound_line("Reconstructor", rec["counts"], cores),
        bound_line("Scorer", sco["counts"], cores),
        "",
    ]
