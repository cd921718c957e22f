"""The cluster benchmark: its summaries and ratios, its section, and a tiny run on the broker."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from rollstream.dev.bench.cluster import (
    ClusterBenchConfig,
    KafkaSetup,
    run_cluster_bench,
    summarize,
)
from rollstream.dev.bench.cluster_report import cluster_section
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.summary import summary_table
from rollstream.dev.broker import BrokerInfo
from rollstream.kafka.admin import TopicAdmin
from rollstream.settings import KafkaSettings


def _run(rate: float, p99: float, broker_cpu_s: float = 1.0, stored: int = 100) -> dict[str, Any]:
    return {
        "records_per_s": rate,
        "mb_per_s": rate / 1000,
        "cpu_us_per_record": 50.0,
        "elapsed_s": 100 / rate,
        "broker_cpu_s": broker_cpu_s,
        "stored": stored,
        "spooled": 0,
        "send_failures": 0,
        "replicas": 3,
        "min_insync": "2",
        "latency": {
            "p50_ms": p99 / 4,
            "p95_ms": p99 / 2,
            "p99_ms": p99,
            "max_ms": p99 * 2,
            "rate_achieved": 999.0,
            "records_per_batch": 1.5,
            "spooled": 1,
            "send_failures": 0,
        },
    }


def _setups() -> list[dict[str, Any]]:
    single = {"name": "single", "nodes": 1, "replication_factor": 1, "min_insync_replicas": 1}
    cluster = {"name": "cluster", "nodes": 3, "replication_factor": 3, "min_insync_replicas": 2}
    return [single | {"broker_processes": 1}, cluster | {"broker_processes": 3}]


def _summary() -> dict[str, Any]:
    runs = {
        "single": [_run(1000, 4.0), _run(1200, 6.0), _run(800, 5.0)],
        "cluster": [_run(500, 12.0, 3.0), _run(400, 10.0, 2.0), _run(300, 20.0, 2.0, stored=99)],
    }
    return summarize(_setups(), runs, records=100)


def test_medians_ranges_and_losses_per_setup() -> None:
    single, cluster = _summary()["setups"]
    assert (single["records_per_s"], single["records_per_s_range"]) == (1000, [800, 1200])
    assert single["mb_per_s"] == 1.0  # the median run's, not a median of its own
    assert (single["latency_p99_ms"], single["latency_p99_range"]) == (5.0, [4.0, 6.0])
    assert (single["latency_p50_ms"], single["latency_max_ms"]) == (1.25, 12.0)
    assert (cluster["lost"], cluster["spooled"]) == (1, 3)
    # Broker CPU: per round 3 s over 0.2 s, 2 s over 0.25 s, 2 s over 1/3 s; per record 2 s
    # over 100 records in two rounds of three.
    assert cluster["broker_cpu_cores"] == 8.0 and cluster["broker_cpu_us_per_record"] == 20_000
    assert (cluster["replicas_created"], cluster["min_insync_created"]) == (3, "2")


def test_ratios_are_cluster_over_single_with_the_rounds_range() -> None:
    ratio = _summary()["ratio"]
    assert (ratio["of"], ratio["to"]) == ("cluster", "single")
    assert ratio["records_per_s"] == 0.4 and ratio["mb_per_s"] == 0.4
    # Per round: 500/1000, 400/1200, 300/800.
    assert ratio["records_per_s_range"] == [0.33, 0.5]
    assert ratio["latency_p99_ms"] == round(12.0 / 5.0, 2)


def test_without_broker_processes_no_cpu_is_claimed() -> None:
    setups = [s | {"broker_processes": 0} for s in _setups()]
    runs = {"single": [_run(1000, 4.0)], "cluster": [_run(500, 8.0)]}
    summary = summarize(setups, runs, records=100)
    assert all(s["broker_cpu_cores"] is None for s in summary["setups"])
    text = "\n".join(cluster_section(_result(summary)))
    assert "What bounds it" not in text and "| n/a / n/a |" in text


def _result(summary: dict[str, Any], cores: int = 2) -> dict[str, Any]:
    return {
        "config": asdict(ClusterBenchConfig()),
        "publisher_settings": {"batch_records": 500, "linger_ms": 250.0},
        "prompt_tokens_mean": 8000.0,
        "machine": {"cores": cores},
        **summary,
    }


def test_section_states_the_ratio_and_what_bounds_it() -> None:
    text = "\n".join(SECTIONS["cluster"](_result(_summary())))
    assert "## Replicated cluster vs one broker (`rollstream bench cluster`)" in text
    assert "- Cluster / single: throughput 0.4 x (rounds 0.33 to 0.5 x)" in text
    assert "| cluster | 3 / 3 / 2 | 400 (300 to 500) |" in text
    assert "bounded by CPU" in text  # 8 broker cores + the publisher on 2 cores
    idle = _summary()
    idle["setups"][-1]["broker_cpu_cores"] = 0.2
    assert "bounded by the replication round trip" in "\n".join(cluster_section(_result(idle)))


def test_readme_row() -> None:
    data = {"benchmarks": {"cluster": _result(_summary())}}
    row = next(line for line in summary_table(data) if line.startswith("| publisher into"))
    assert "400 vs 1,000 records/s (0.4x) into 3 nodes (3 replicas, min ISR 2)" in row


@pytest.mark.integration
async def test_small_run(kafka_settings: KafkaSettings, kafka_broker: BrokerInfo) -> None:
    # Both sides on the session broker: the measuring is what is tested here, the cluster
    # only adds replicas (its start alone would cost more than this test).
    setups = [
        KafkaSetup(name, kafka_settings, 1, 1, 1, (kafka_broker.pid,))
        for name in ("single", "cluster")
    ]
    config = ClusterBenchConfig(
        records=40,
        sessions=4,
        turns=3,
        system_tokens=300,
        tool_result_tokens=20,
        completion_tokens=10,
        rate=200.0,
        latency_records=30,
        rounds=2,
        partitions=2,
        timeout_s=120.0,
    )
    lines: list[str] = []
    result = await run_cluster_bench(config, setups, lines.append)

    assert [line.split(":")[0] for line in lines] == [
        "  round 1 single",
        "  round 1 cluster",
        "  round 2 cluster",  # the order alternates
        "  round 2 single",
    ]
    for setup in result["setups"]:
        assert (setup["lost"], setup["spooled"], setup["send_failures"]) == (0, 0, 0)
        assert (setup["replicas_created"], setup["min_insync_created"]) == (1, "1")
        assert setup["records_per_s"] > 0 and setup["broker_cpu_us_per_record"] >= 0
        assert 0 < setup["latency_p50_ms"] <= setup["latency_p95_ms"] <= setup["latency_p99_ms"]
        assert setup["latency_p99_ms"] <= setup["latency_max_ms"]
        assert setup["latency_rate_achieved"] > 0 and setup["records_per_batch"] >= 1
    assert result["ratio"]["records_per_s"] > 0
    async with TopicAdmin(kafka_settings) as admin:  # every measured topic was dropped
        assert not [
            t for t in await admin.list_topics() if t.startswith(kafka_settings.topic_prefix)
        ]
    assert "Cluster / single: throughput" in "\n".join(SECTIONS["cluster"](result))
