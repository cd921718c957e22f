"""The sizing table: measured unit costs times the workload, and docs/scaling.md kept current."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.bench.sizing import (
    END,
    RESULTS,
    START,
    UnitCosts,
    Workload,
    main,
    plan,
    render,
    unit_costs,
)

ROOT = Path(__file__).resolve().parents[3]


def _costs(**overrides: float) -> UnitCosts:
    values: dict[str, Any] = {
        "proxy_cpu_us_per_token": 40.0,
        "broker_bytes_per_call": 6500.0,
        "reconstructor_calls_per_core_s": 5000.0,
        "scorer_trajectories_per_core_s": 400.0,
        "sources": {},
    }
    return UnitCosts(**(values | overrides))


def test_a_run_needs_what_its_calls_and_tokens_cost() -> None:
    work = Workload()
    p = plan(512, work, _costs())
    assert p.tokens_s == 512 * 3000
    assert p.calls_s == pytest.approx(512 * 3000 / 400)
    assert p.records_s == pytest.approx(p.calls_s * (1 + 2 / 30))
    assert p.bytes_s == pytest.approx(p.calls_s * 6500)
    # 8 GPUs x 3,000 tokens/s = 24,000/s per node; a worker at 40 µs/token and half a core
    # carries 12,500/s: two workers.
    assert p.workers_per_node == 2
    assert p.reconstructors == 2  # 3,840 calls/s at 2,500 per instance
    assert p.partitions == 6 and p.brokers == 3
    assert p.nodes == 64 and p.sessions == 512 * 32


def test_costs_scale_the_units_that_carry_them() -> None:
    work = Workload()
    cheap, dear = plan(4096, work, _costs()), plan(4096, work, _costs(proxy_cpu_us_per_token=80))
    assert dear.workers_per_node == 2 * cheap.workers_per_node
    slow = plan(4096, work, _costs(reconstructor_calls_per_core_s=500))
    assert slow.reconstructors >= 10 * cheap.reconstructors - 9
    assert slow.partitions >= slow.reconstructors and slow.partitions % 6 == 0
    heavy = plan(4096, work, _costs(broker_bytes_per_call=65000))
    assert heavy.brokers > cheap.brokers >= 3


def _benchmarks() -> dict[str, Any]:
    machine = {"machine": {"date": "2026-12-02 08:00:00 UTC"}}
    return {
        "stream": {"rollstream_cpu_us_per_token": 40.0, **machine},
        "publisher": {
            "throughput": {
                "encodings": [{"encoding": "delta_with_request", "log_bytes_per_record": 6500}]
            },
            **machine,
        },
        "pipeline": {
            "reconstructor": {"per_core_s": 5000},
            "scorer": {"per_core_s": 400},
            **machine,
        },
    }


def test_the_table_names_its_sources_and_every_size() -> None:
    costs = unit_costs(_benchmarks())
    assert costs.proxy_cpu_us_per_token == 40.0 and costs.broker_bytes_per_call == 6500
    text = "\n".join(render(_benchmarks()))
    assert "| | 64 GPUs | 512 GPUs | 4,096 GPUs |" in text
    assert "2026-12-02 08:00:00 UTC" in text
    assert "`tokens_per_gpu_s` = 3000" in text


def test_write_and_check_round_trip(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"benchmarks": _benchmarks()}))
    doc = tmp_path / "scaling.md"
    doc.write_text(f"# Scaling\n\n{START}\nold\n{END}\n\nafter\n")
    assert main(["--results", str(results), "--check", str(doc)]) == 1
    assert main(["--results", str(results), "--write", str(doc)]) == 0
    assert main(["--results", str(results), "--check", str(doc)]) == 0
    assert doc.read_text().endswith("\n\nafter\n") and "old" not in doc.read_text()


def test_docs_scaling_matches_the_results() -> None:
    results = json.loads((ROOT / RESULTS).read_text())["benchmarks"]
    if "stream" not in results:
        pytest.fail("bench/results.json has no stream results; run `rollstream bench stream`")
    doc = ROOT / "docs" / "scaling.md"
    assert main(["--results", str(ROOT / RESULTS), "--check", str(doc)]) == 0
