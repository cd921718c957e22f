"""The ``bench pipeline`` section of RESULTS.md."""

from __future__ import annotations

from typing import Any

PIPELINE_TARGETS = {"calls_per_s": 1000, "latency_p99_ms": 2000}


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def _num(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,}{unit}"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))


def pipeline_section(result: dict[str, Any]) -> list[str]:
    """Reconstructor and scorer throughput through Kafka, end-to-end latency, verdicts."""
    config, rec, sco, e2e = (
        result["config"],
        result["reconstructor"],
        result["scorer"],
        result["end_to_end"],
    )
    lines = [
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
        "| service | rate | measured over | CPU / waiting for a CPU | CPU ms per unit "
        "| per core at that cost | RSS MB | output |",
        "|---|---:|---|---|---:|---:|---:|---|",
        f"| reconstructor | {_num(rec['per_s'], ' calls/s')} | {rec['measured']:,} calls, "
        f"{rec['span_s']} s | {_share(rec['cpu_utilisation'])} / "
        f"{_share(rec.get('cpu_wait_share'))} | "
        f"{_num(rec['cpu_ms_per_unit'])} per call | {_num(rec.get('per_core_s'), ' calls/s')} "
        f"| {rec['rss_mb']} | {rec['sessions']} trajectories ({_counts(rec['statuses'])}), "
        f"{rec['duplicates']} duplicated |",
        f"| scorer | {_num(sco['per_s'], ' trajectories/s')} | {sco['measured']:,} "
        f"trajectories, {sco['span_s']} s | {_share(sco['cpu_utilisation'])} / "
        f"{_share(sco.get('cpu_wait_share'))} | "
        f"{_num(sco['cpu_ms_per_unit'])} per trajectory | "
        f"{_num(sco.get('per_core_s'), ' trajectories/s')} | {sco['rss_mb']} | "
        f"{sco['trajectories']} scored (rewards {_counts(sco['rewards'])}), "
        f"{sco['duplicates']} duplicated |",
        "",
        f"End to end: both services running, {e2e['sessions']} sessions of "
        f"{e2e['calls_per_session']} calls (prompts up to {e2e['prompt_tokens_last']:,} tokens) "
        f"arriving at {e2e['rate_target']:g} sessions/s, each session's records spread over "
        f"{config['session_spread_s']:g} s so sessions overlap. Latency per session: from "
        "handing its SessionEnded (its last record) to the producer (linger 5 ms) until its "
        "Scored record, and until its trajectory, reaches the `read_committed` reader.",
        "",
        "| sessions/s achieved | scored (missing, duplicated) | → trajectory p50 / p99 (ms) "
        "| → scored p50 / p90 / p99 / max (ms) | reconstructor CPU | scorer CPU |",
        "|---:|---|---|---|---:|---:|",
        f"| {e2e['rate_achieved']} | {e2e['scored']} of {e2e['sessions']} ({e2e['missing']}, "
        f"{e2e['duplicates']}) | {_num(e2e['trajectory_p50_ms'])} / "
        f"{_num(e2e['trajectory_p99_ms'])} | {_num(e2e['latency_p50_ms'])} / "
        f"{_num(e2e['latency_p90_ms'])} / {_num(e2e['latency_p99_ms'])} / "
        f"{_num(e2e['latency_max_ms'])} | {_share(e2e['reconstructor_cpu_utilisation'])} "
        f"| {_share(e2e['scorer_cpu_utilisation'])} |",
        "",
    ]
    rate = rec["per_s"]
    p99 = e2e["latency_p99_ms"]
    rate_ok = rate is not None and rate >= PIPELINE_TARGETS["calls_per_s"]
    p99_ok = p99 is not None and p99 <= PIPELINE_TARGETS["latency_p99_ms"] and not e2e["missing"]
    lines += [
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
    return lines
