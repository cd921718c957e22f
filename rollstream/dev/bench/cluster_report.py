"""The ``bench cluster`` section of RESULTS.md: the cluster against one broker."""

from __future__ import annotations

from rollstream.dev.bench.cluster import Result


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
