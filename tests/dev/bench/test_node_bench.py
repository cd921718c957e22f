"""The node benchmark runs both modes at tiny sizes and reports sane figures."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from rollstream.cli.bench import bench
from rollstream.dev.bench.node import (
    MODES,
    STAGES,
    NodeBenchConfig,
    run_node_bench,
    run_slot_use,
    slots_peak,
)
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.containers import DockerEngine, ImageResult
from rollstream.producers.node.pool import StageSpan
from rollstream.sandbox.docker import LABEL

TINY = NodeBenchConfig(
    sessions=4,
    rounds=2,
    max_init=2,
    max_run=2,
    max_post=2,
    prewarm=2,
    setup_s=0.1,
    run_s=0.1,
    files=2,
    file_bytes=200,
)


def test_run_slot_use_counts_idle_and_starved_slot_time() -> None:
    # Two run slots over [0, 4]: a runs 0-2, b 0-4, c 3-3.5. From 2 to 3 a slot is free while c
    # waits for its init (starved); from 3.5 to 4 one is free with nothing left to run (idle).
    spans = [
        StageSpan("run", "a", 0.0, 2.0),
        StageSpan("run", "b", 0.0, 4.0),
        StageSpan("init", "c", 0.5, 3.0),
        StageSpan("run", "c", 3.0, 3.5),
    ]
    assert run_slot_use(spans, max_run=2) == pytest.approx((1.5 / 8, 1 / 8))
    # A third slot, and d running 0-1: slots free 1 (1-2), 2 (2-3), 1 (3-3.5), 2 (3.5-4), 4.5
    # slot-seconds of 12; starved only while c waits, one slot from 1 to 3.
    spans.append(StageSpan("run", "d", 0.0, 1.0))
    assert run_slot_use(spans, max_run=3) == pytest.approx((4.5 / 12, 2 / 12))
    assert run_slot_use([], max_run=2) == (0.0, 0.0)
    assert slots_peak(spans) == 4  # a, b, d running and c in init from 0.5 to 1


async def test_both_modes_run_every_session(tmp_path: Path) -> None:
    lines: list[str] = []
    result = await run_node_bench(TINY, lines.append, tmp_path)
    assert len(lines) == 1 + 2 * 2  # the start cost, then each mode in each round
    assert not os.listdir(tmp_path)  # session directories and the run's temp dir removed
    modes = result["modes"]
    assert [m["mode"] for m in modes] == list(MODES)
    assert [m["prewarm"] for m in modes] == [0, 2]
    for m in modes:
        assert (m["rounds"], m["sessions"], m["completed"], m["errors"]) == (2, 8, 8, 0)
        low, high = m["sessions_per_min_range"]
        assert 0 < low <= m["sessions_per_min"] <= high
        # A session cannot take less than its setup and harness sleeps, nor (here) minutes.
        assert 0.2 <= m["latency_mean_s"] < 30
        assert 0.2 <= m["latency_p50_s"] <= m["latency_p99_s"] < 30
        stage = m["stage_mean_s"]
        assert set(stage) == set(STAGES)
        assert stage["init"] >= 0.1 and stage["run"] >= 0.1 and stage["post"] > 0
        assert set(m["peak"]) == set(STAGES)
        assert m["peak"]["init"] <= 2 and 1 <= m["peak"]["run"] <= 2 and m["peak"]["post"] <= 2
        assert m["slots_peak"] <= 2 + m["prewarm"]
        assert 0 <= m["run_starved_share"] <= m["run_idle_share"] < 1
        assert result["bound_per_min"][m["mode"]] > 0
    assert modes[0]["slots_peak"] == 2  # without pre-warming: init only for a free run slot
    low, high = result["speedup_range"]
    assert 0 < low <= result["speedup"] <= high
    text = "\n".join(SECTIONS["node"](result))
    assert "## Rollout node (`rollstream bench node`)" in text
    assert "| local | 0 |" in text and "| local | 2 |" in text
    assert "Pre-warming:" in text
    [cost] = result["start_cost"]
    assert cost["runtime"] == "local" and cost["probes"] == TINY.start_probes
    assert 0 < cost["start_ms"] <= cost["start_ms_max"]
    assert 0 < cost["stop_ms"] <= cost["stop_ms_max"]
    assert "Docker runtime" not in text


async def test_the_docker_runtime_runs_beside_the_local_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_engine: DockerEngine,
    docker_base: ImageResult,
) -> None:
    docker = pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", docker_engine.docker_host)
    config = dataclasses.replace(
        TINY, rounds=1, runtimes=("local", "docker"), image=docker_base.tag, start_probes=2
    )
    lines: list[str] = []
    result = await run_node_bench(config, lines.append, tmp_path)
    assert [(m["runtime"], m["mode"]) for m in result["modes"]] == [
        ("local", "no_prewarm"),
        ("local", "prewarm"),
        ("docker", "no_prewarm"),
        ("docker", "prewarm"),
    ]
    for m in result["modes"]:
        assert (m["sessions"], m["completed"], m["errors"]) == (4, 4, 0), m
        assert m["bound_per_min"] > 0
    assert [c["runtime"] for c in result["start_cost"]] == ["local", "docker"]
    assert all(c["probes"] == 2 and c["start_ms"] > 0 for c in result["start_cost"])
    assert set(result["by_runtime"]) == {"local", "docker"}
    assert result["speedup"] == result["by_runtime"]["local"]["speedup"]
    text = "\n".join(SECTIONS["node"](result))
    assert "| docker | 0 |" in text and "| docker | 2 |" in text
    assert "- Docker runtime: pre-warming gives" in text
    assert "docker " in text.split("A sandbox's start / removal")[1]
    client = docker.DockerClient(base_url=docker_engine.docker_host)
    try:  # every container of the run removed: the sessions', the pools', the probes'
        assert client.containers.list(all=True, filters={"label": LABEL}) == []
    finally:
        client.close()


def test_cli_records_the_node_section_beside_the_others(tmp_path: Path) -> None:
    json_path, markdown = tmp_path / "results.json", tmp_path / "RESULTS.md"
    json_path.write_text(json.dumps({"benchmarks": {"other": {"kept": True}}}))
    args = ["--sessions", "2", "--rounds", "1", "--max-init", "1", "--max-run", "1"]
    args += ["--prewarm", "1", "--setup-s", "0.05", "--run-s", "0.05", "--files", "1"]
    args += ["--json", str(json_path), "--markdown", str(markdown)]
    args += ["--work-root", str(tmp_path / "work")]
    outcome = CliRunner().invoke(bench, ["node", *args])
    assert outcome.exit_code == 0, outcome.output
    data = json.loads(json_path.read_text())["benchmarks"]
    assert data["other"] == {"kept": True}
    assert [m["completed"] for m in data["node"]["modes"]] == [2, 2]
    assert "## Rollout node" in markdown.read_text()
