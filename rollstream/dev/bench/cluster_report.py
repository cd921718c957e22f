"""``bench cluster``: its rounds summarised (medians, ratios) and its section of RESULTS.md."""

from __future__ import annotations

import statistics
from typing import Any

Result = dict[str, Any]

#: The latency figures compared between the setups.
LATENCIES = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")


def _median_run(runs: list[Result]) -> Result:
    """The run of median throughput, the upper one of an even count (its MB/s goes with it)."""
    return sorted(runs, key=lambda run: run["records_per_s"])[len(runs) // 2]


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def summarize_setup(meta: Result, runs: list[Result], records: int) -> Result:
    """One setup's rounds: medians (ranges where they tell something), totals of losses."""
    rates = [run["records_per_s"] for run in runs]
    median = _median_run(runs)
    latency = [run["latency"] for run in runs]
    measured_cpu = meta.get("broker_processes", 0) > 0
    broker_cores = [run["broker_cpu_s"] / run["elapsed_s"] for run in runs] if measured_cpu else []
    broker_us = [run["broker_cpu_s"] / records * 1e6 for run in runs] if measured_cpu else []
    p99 = [lat["p99_ms"] for lat in latency]
    rates_achieved = [lat["rate_achieved"] for lat in latency if lat["rate_achieved"]]
    return meta | {
        "replicas_created": min(run["replicas"] for run in runs),
        "min_insync_created": runs[0]["min_insync"],
        "records_per_s": round(median["records_per_s"]),
        "records_per_s_range": [round(min(rates)), round(max(rates))],
        "mb_per_s": round(median["mb_per_s"], 1),
        "client_cpu_us_per_record": round(
            statistics.median(run["cpu_us_per_record"] for run in runs), 1
        ),
        "broker_cpu_cores": _round(statistics.median(broker_cores), 2) if broker_cores else None,
        "broker_cpu_us_per_record": round(statistics.median(broker_us)) if broker_us else None,
        "latency_p50_ms": round(statistics.median(lat["p50_ms"] for lat in latency), 2),
        "latency_p95_ms": round(statistics.median(lat["p95_ms"] for lat in latency), 2),
        "latency_p99_ms": round(statistics.median(p99), 2),
        "latency_p99_range": [min(p99), max(p99)],
        "latency_max_ms": max(lat["max_ms"] for lat in latency),
        "latency_rate_achieved": _round(statistics.median(rates_achieved), 1)
        if rates_achieved
        else None,
        "records_per_batch": round(
            statistics.median(lat["records_per_batch"] for lat in latency), 2
        ),
        "lost": sum(records - run["stored"] for run in runs),
        "spooled": sum(run["spooled"] + run["latency"]["spooled"] for run in runs),
        "send_failures": sum(
            run["send_failures"] + run["latency"]["send_failures"] for run in runs
        ),
    }


def ratios(
    base: Result, other: Result, base_runs: list[Result], other_runs: list[Result]
) -> Result:
    """``other`` / ``base`` for throughput and latency; per-round throughput ratios' range.

    Both setups are measured in every round, so a round's ratio compares runs minutes apart
    at most: its range says how much the machine's load moved the comparison.
    """
    per_round = [
        o["records_per_s"] / b["records_per_s"] for b, o in zip(base_runs, other_runs, strict=True)
    ]
    out: Result = {
        "of": other["name"],
        "to": base["name"],
        "records_per_s": round(other["records_per_s"] / base["records_per_s"], 2),
        "records_per_s_range": [round(min(per_round), 2), round(max(per_round), 2)],
        "mb_per_s": round(other["mb_per_s"] / base["mb_per_s"], 2) if base["mb_per_s"] else None,
    }
    for key in LATENCIES:
        out[key] = round(other[key] / base[key], 2) if base[key] else None
    return out


def summarize(setups: list[Result], runs: dict[str, list[Result]], records: int) -> Result:
    """Every setup summarised, and the last one against the first (cluster / single broker)."""
    summaries = [summarize_setup(meta, runs[meta["name"]], records) for meta in setups]
    result: Result = {"records": records, "setups": summaries}
    if len(summaries) > 1:
        base, other = summaries[0], summaries[-1]
        result["ratio"] = ratios(base, other, runs[base["name"]], runs[other["name"]])
    return result


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,}{unit}"


def _cores(setup: Result) -> float:
    """Cores the publisher's process kept busy while it ran at full speed."""
    return float(setup["client_cpu_us_per_record"] * setup["records_per_s"] / 1e6)


def cluster_section(result: Result) -> list[str]:
    """The setups side by side, the ratios, and what bounds them on this machine."""
    config, setups = result["config"], result["setups"]
    settings = result.get("publisher_settings", {})
    cores = result.get("machine", {}).get("cores", "?")
    lines = [
        "## Replicated cluster vs one broker (`rollstream bench cluster`)",
        "",
        f"One `CapturePublisher` (idempotent producer, acks=all, zstd) into a single broker "
        f"(topics of 1 replica, min.insync.replicas 1) and into a cluster of {config['nodes']} "
        f"KRaft nodes (topics of {setups[-1]['replication_factor']} replicas, min.insync.replicas "
        f"{setups[-1]['min_insync_replicas']}: a write is acknowledged once two replicas have "
        f"it), both started by the bench on this machine (JVM heap {config['heap']} each) and "
        f"running side by side; a fresh {config['partitions']}-partition events-like topic per "
        f"setup and round. {config['rounds']} rounds alternating the setups' order; medians "
        "(ranges in brackets).",
        "",
        f"Throughput: {config['records']:,} pre-encoded CallRecords ({config['encoding']}, "
        f"{result['prompt_tokens_mean']:,.0f}-token prompts on average) offered as fast as the "
        f"publisher takes them, its default batching ({settings.get('batch_records', '?')} "
        f"records, linger {settings.get('linger_ms', '?')} ms), timed from the first `publish()` "
        "to the last acknowledgement, as in the publisher bench. Brokers' CPU: the broker "
        "JVMs' CPU time over that span (cores busy) and per record. Latency: "
        f"{config['latency_records']:,} of the same records at {config['rate']:g} a second, "
        f"the publisher lingering {config['latency_linger_ms']:g} ms (its default linger would "
        "add up to that much to every record in both setups alike); per record, `publish()` "
        "to its acknowledgement.",
        "",
        "| setup | nodes / replicas / min ISR | records/s | MB/s | brokers' CPU: cores / µs "
        "per record | publisher CPU µs/record | publish → ack p50 / p95 / p99 (max) ms "
        "| records per batch at that rate | lost / spooled |",
        "|---|---|---:|---:|---|---:|---|---:|---|",
    ]
    for s in setups:
        low, high = s["records_per_s_range"]
        lines.append(
            f"| {s['name']} | {s['nodes']} / {s['replicas_created']} / "
            f"{s['min_insync_created'] or 'broker default'} | {s['records_per_s']:,} ({low:,} to "
            f"{high:,}) | {s['mb_per_s']} | {_num(s['broker_cpu_cores'])} / "
            f"{_num(s['broker_cpu_us_per_record'])} | {s['client_cpu_us_per_record']} "
            f"| {s['latency_p50_ms']} / {s['latency_p95_ms']} / {s['latency_p99_ms']} "
            f"({s['latency_max_ms']}) | {s['records_per_batch']} | {s['lost']} / {s['spooled']} |"
        )
    lines.append("")
    ratio = result.get("ratio")
    if ratio is not None:
        low, high = ratio["records_per_s_range"]
        lines.append(
            f"- {ratio['of'].capitalize()} / {ratio['to']}: throughput {ratio['records_per_s']} x "
            f"(rounds {low} to {high} x), MB/s {_num(ratio['mb_per_s'])} x; publish → ack "
            f"p50 {_num(ratio['latency_p50_ms'])} x, p95 {_num(ratio['latency_p95_ms'])} x, "
            f"p99 {_num(ratio['latency_p99_ms'])} x."
        )
    lines += _bounds(setups, cores)
    lines.append("")
    return lines


def _bounds(setups: list[Result], cores: object) -> list[str]:
    """What limits the comparison here: every JVM and the publisher share the same cores."""
    base, other = setups[0], setups[-1]
    if base["broker_cpu_cores"] is None or other["broker_cpu_cores"] is None:
        return []
    busy = other["broker_cpu_cores"] + _cores(other)
    saturated = isinstance(cores, int) and busy >= 0.8 * cores
    verdict = (
        "the cluster's rate is bounded by CPU, not by a network or disks; on separate machines "
        "each node would have its own cores"
        if saturated
        else "the cores were not all busy, so the cluster's rate is bounded by the replication "
        "round trip (the publisher waits for each batch's acknowledgement before the next)"
    )
    return [
        f"- What bounds it: the {other['nodes']} nodes, the single broker and the publisher "
        f"share this machine's {cores} cores (other processes on it too, if any). At full speed "
        f"the {other['name']}'s brokers kept {other['broker_cpu_cores']} cores busy "
        f"({other['broker_cpu_us_per_record']:,.0f} µs of broker CPU per record against "
        f"{base['broker_cpu_us_per_record']:,.0f} µs on the single broker: every record is written "
        f"{other['replication_factor']} times, fetched by {other['replication_factor'] - 1} "
        f"followers) and the publisher {_cores(other):.2f}, {busy:.2f} cores in all: {verdict}. "
        "Latency adds the followers' fetch to the leader's write before the acknowledgement.",
    ]
