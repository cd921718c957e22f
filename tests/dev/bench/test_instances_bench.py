"""The instances benchmark: scaling figures, group and idle checks, a tiny run on the broker."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from rollstream.dev.bench.instances import (
    InstancesBenchConfig,
    bound_line,
    run_instances_bench,
    with_scaling,
)
from rollstream.dev.bench.instances_gate import idle, member_partitions
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.summary import summary_table
from rollstream.dev.broker import BrokerInfo
from rollstream.kafka.admin import TopicAdmin
from rollstream.settings import KafkaSettings


def _count(n: int, rate: int | None, share: float = 0.9, wait: float = 0.0) -> dict[str, Any]:
    return {
        "instances": n,
        "per_s": rate,
        "per_instance_s": rate // n if rate else None,
        "measured": 1000,
        "span_s": 2.0,
        "first_output_s": 0.5,
        "cpu_s": [share * 2] * n,
        "cpu_utilisation": [share] * n,
        "cpu_wait_share": [wait] * n,
        "cpu_ms_per_unit": 0.2,
        "rss_mb": [100.0] * n,
        "partitions": [6 // n] * n,
        "rebalanced": 0,
        "duplicates": 0,
    }


def test_scaling_against_the_smallest_count() -> None:
    counts = with_scaling([_count(1, 1000), _count(2, 1900), _count(3, 2100, 0.6)])
    assert [c["speedup"] for c in counts] == [1.0, 1.9, 2.1]
    assert [c["efficiency"] for c in counts] == [1.0, 0.95, 0.7]
    assert [c["cores"] for c in counts] == [0.9, 1.8, 1.8]
    missing = with_scaling([_count(1, None), _count(2, 10)])
    assert missing[1]["efficiency"] is None and missing[0]["speedup"] is None


def test_bound_line_says_flat_cores_or_kafka() -> None:
    flat = with_scaling([_count(1, 1000), _count(2, 1900)])
    assert bound_line("Scorer", flat, 2).endswith("at 2 instances (in all 1.9 x): flat.")
    cores = with_scaling([_count(1, 1000), _count(3, 2100, 0.6, wait=0.4)])
    line = bound_line("Reconstructor", cores, 2)
    assert "0.7 x one instance's rate at 3 instances" in line
    assert "bounded by cores. In all the 3 instances used 1.8 cores, the broker (not" in line
    assert (
        "the reader n/a: 1.80 of the machine's 2; each instance waited for a CPU up to 40%" in line
    )
    # The broker's and the reader's cores count towards the machine's.
    busy = with_scaling([_count(1, 1000, 0.3), _count(3, 1500, 0.2) | {"broker_cores": 0.9}])
    assert "bounded by cores. In all" in bound_line("Scorer", busy, 2)
    kafka = with_scaling([_count(1, 1000, 0.3), _count(3, 1500, 0.2)])
    assert "not bounded by cores (the 3 instances used 0.6 cores" in bound_line("Scorer", kafka, 2)
    assert "too few counts" in bound_line("Scorer", with_scaling([_count(1, 5)]), 2)


def _result() -> dict[str, Any]:
    counts = [_count(1, 1000), _count(2, 1800), _count(3, 2000, 0.6, 0.3)]
    return {
        "config": asdict(InstancesBenchConfig()),
        "services": "subprocesses",
        "machine": {"cores": 2},
        "reconstructor": {
            "sessions": 600,
            "calls": 30_000,
            "prompt_tokens_last": 32_010,
            "counts": with_scaling(counts),
        },
        "scorer": {"trajectories": 1200, "copies": 2, "counts": with_scaling(counts)},
    }


def test_section_and_readme_row() -> None:
    text = "\n".join(SECTIONS["instances"](_result()))
    assert "as 1, 2, 3 instances (subprocesses in one consumer group)" in text
    assert "| 2 | 3 / 3 | 1,800 | 900 | 0.9 | 1.8 / 1.8 (90% / 90%) | 0% / 0% |" in text
    assert "- Reconstructor: per instance 0.67 x one instance's rate at 3 instances" in text
    table = summary_table({"benchmarks": {"instances": _result()}})
    row = next(line for line in table if line.startswith("| reconstructor and scorer"))
    assert "with 1 / 2 / 3 instances: reconstructor 1,000 / 1,800 / 2,000 calls/s" in row
    assert "(1,000 / 900 / 666 each), scorer 1,000 / 1,800 / 2,000 trajectories/s" in row


def test_member_partitions_reads_the_assignments() -> None:
    assignment = ConsumerProtocolMemberAssignment(0, [("t", [0, 2, 4])], b"").encode()
    group = {
        "members": [
            {"member_id": "a", "member_assignment": assignment},
            {"member_id": "b", "member_assignment": b""},  # joined, not yet assigned
        ]
    }
    assert member_partitions(group) == {"a": 3, "b": 0}


def test_idle_reads_the_recent_cpu_samples() -> None:
    now = time.perf_counter()
    old = (now - 5.0, 0.0, 50.0, 0.0)  # outside the window: busy then, not counted
    assert idle([old, (now - 0.4, 1.0, 50.0, 0.0), (now - 0.01, 1.01, 50.0, 0.0)])
    assert not idle([(now - 0.4, 1.0, 50.0, 0.0), (now - 0.01, 1.2, 50.0, 0.0)])  # half a core
    assert not idle([(now - 0.01, 1.0, 50.0, 0.0)])  # too few samples to tell


@pytest.mark.integration
async def test_small_run(kafka_settings: KafkaSettings, kafka_broker: BrokerInfo) -> None:
    config = InstancesBenchConfig(
        instances=(1, 2),
        sessions=12,
        pool=2,
        calls=3,
        system_tokens=100,
        tool_result_tokens=10,
        completion_tokens=5,
        scorer_copies=2,
        partitions=4,
        # Small batches: several output transactions, so the rates have something to measure.
        reconstructor_batch_records=5,
        scorer_batch_records=2,
        settle_s=0.2,
        timeout_s=120.0,
    )
    lines: list[str] = []
    result = await run_instances_bench(config, kafka_settings, lines.append, (kafka_broker.pid,))

    rec, score = result["reconstructor"]["counts"], result["scorer"]["counts"]
    assert [c["instances"] for c in rec] == [c["instances"] for c in score] == [1, 2]
    assert [c["partitions"] for c in rec] == [c["partitions"] for c in score] == [[4], [2, 2]]
    for c in rec:
        assert c["statuses"] == {"complete": 12} and c["duplicates"] == 0
        assert c["measured"] == 36 and c["per_s"] > 0 and len(c["cpu_s"]) == c["instances"]
        assert 0 < c["first_output_s"] < c["span_s"]
        assert c["broker_cores"] >= 0 and c["reader_cores"] >= 0
    for c in score:
        assert c["duplicates"] == 0 and c["measured"] == 24 and c["per_s"] > 0
    assert result["scorer"]["trajectories"] == 24  # 12 trajectories, twice each
    assert rec[0]["efficiency"] == 1.0 and rec[1]["efficiency"] > 0
    assert sum(line.startswith("  ") and "instance(s):" in line for line in lines) == 2
    async with TopicAdmin(kafka_settings) as admin:  # every count's topics were dropped
        assert not [
            t for t in await admin.list_topics() if t.startswith(kafka_settings.topic_prefix)
        ]
    assert "Reconstructor (calls):" in "\n".join(SECTIONS["instances"](result))
