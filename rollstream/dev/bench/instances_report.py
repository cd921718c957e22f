"""``bench instances``: scaling figures from the per-count rates, and its RESULTS.md section."""

from __future__ import annotations

from typing import Any

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
    lines = [
        f"| instances | partitions each | {unit}/s in all | per instance | x per instance of 1 "
        "| CPU s per instance (share of a core) | waiting for a CPU | CPU ms per unit "
        "| cores: instances / broker / reader | measured over (first output) "
        "| rebalances / duplicates |",
        "|---:|---|---:|---:|---:|---|---|---:|---|---|---|",
    ]
    for c in counts:
        shares = _list(c["cpu_utilisation"], "{:.0%}")
        lines.append(
            f"| {c['instances']} | {_list(c['partitions'])} | {_num(c['per_s'])} "
            f"| {_num(c['per_instance_s'])} | {_num(c['efficiency'])} "
            f"| {_list(c['cpu_s'])} ({shares}) | {_list(c['cpu_wait_share'], '{:.0%}')} "
            f"| {_num(c['cpu_ms_per_unit'])} | {c['cores']} / {_num(c.get('broker_cores'))} / "
            f"{_num(c.get('reader_cores'))} | {c['measured']:,} in {c['span_s']} s "
            f"({c.get('first_output_s', '?')} s) "
            f"| {c['rebalanced']} / {c['duplicates']} |"
        )
    return lines


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
