"""The fidelity matrix: a small run through a real broker and Pi, and its RESULTS.md section."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.consumers.reconstruct.fidelity import FidelityRow
from rollstream.dev.bench.fidelity import (
    RunRow,
    parse_modes,
    parse_names,
    run_fidelity_bench,
)
from rollstream.dev.bench.fidelity_serving import FidelityBenchConfig
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.dev.bench.suite import ORDER
from rollstream.settings import KafkaSettings
from tests.harness_stack import harnesses_installed

HEADING = "## Model families (`rollstream bench fidelity`)"


@pytest.mark.integration
async def test_a_small_matrix_runs_and_reports(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    bin_dir = harnesses_installed()
    config = FidelityBenchConfig(families=("qwen3",), harnesses=("pi",), timeout_s=60)
    lines: list[str] = []
    result = await run_fidelity_bench(config, kafka_settings, bin_dir, lines.append, tmp_path)
    rows = {r["mode"]: r for r in result["rows"]}
    assert list(rows) == ["ordinary", "exact"]
    for row in rows.values():
        assert (row["outcome"], row["error"], row["exit_code"]) == ("ok", "", 0), row
        assert row["solved"] and row["failed_calls"] == 0
        assert row["violations"] == 0 and row["parse_failures"] == 0
        assert row["calls"] >= 3 and row["threads"] >= 1 and row["trainable_tokens"] > 0
        assert len(row["answers"]) == row["calls"]
        assert "echo polar > hello.txt" in row["answers"][0]
    exact, ordinary = rows["exact"], rows["ordinary"]
    assert exact["segments"] == exact["threads"]  # each thread trains as one segment
    assert exact["exact_calls"] == exact["calls"] - exact["threads"]
    assert ordinary["exact_calls"] == 0 and ordinary["gap_calls"] == 0
    assert result["families"] == {"qwen3": {"stand_in": ""}}
    assert [line.split(":")[0].strip() for line in lines] == ["qwen3 pi ordinary", "qwen3 pi exact"]
    # The section as `rollstream bench fidelity` writes it.
    data = record(tmp_path / "results.json", "fidelity", result)
    markdown = tmp_path / "RESULTS.md"
    write_markdown(data, markdown)
    text = markdown.read_text()
    assert HEADING in text
    assert "| qwen3 | pi | ordinary | ok |" in text and "| qwen3 | pi | exact | ok |" in text
    assert "Harness runs that completed the scripted task: 2 of 2." in text
    json.dumps(data)  # plain data throughout


def _row(mode: str, **figures: Any) -> dict[str, Any]:
    fidelity = FidelityRow("qwen3", "pi", mode, **figures)
    return RunRow("qwen3", "pi", mode, "ok", 2.0, 0, True, fidelity=fidelity).to_json()


def _result() -> dict[str, Any]:
    rows = [
        _row(
            "ordinary",
            calls=3,
            threads=1,
            segments=3,
            breaks=Counter(drift=2),
            trainable_tokens=1234,
        ),
        _row("exact", calls=3, threads=1, segments=1, trainable_tokens=120, exact_calls=2)
        | {"gap_calls": 2, "gap_tokens": 157},
        RunRow(
            "kimi-k2", "claude-code", "exact", "timeout", 180.0, stderr_tail="looping"
        ).to_json(),
        RunRow("glm-4.5", "codex", "ordinary", "error", error="OSError: gone").to_json(),
    ]
    families = {
        "qwen3": {"stand_in": ""},
        "kimi-k2": {"stand_in": "no registry ships Kimi's vocabulary"},
        "glm-4.5": {"stand_in": "no registry ships GLM's vocabulary"},
    }
    config = {"timeout_s": 180.0}
    return {"config": config, "task": "Create hello.txt with polar.", "families": families,
            "rows": rows, "seconds": 90.0}  # fmt: skip


def test_the_section_has_one_row_per_run() -> None:
    lines = SECTIONS["fidelity"](_result())
    text = "\n".join(lines)
    assert lines[0] == HEADING
    assert "| qwen3 | pi | ordinary | ok | 3 | 1 | 3 | drift 2 | 0 | 1,234 | 0 | - |" in lines
    assert "| qwen3 | pi | exact | ok | 3 | 1 | 1 | 0 | 0 | 120 | 2 | 2 / 157 (78) |" in lines
    # Runs without records say how they ended, their figures blank.
    assert "| kimi-k2 | claude-code | exact | timeout | - | - | - | - | - | - | - | - |" in lines
    assert "| glm-4.5 | codex | ordinary | error | - |" in text
    assert "Harness runs that completed the scripted task: 2 of 4." in text
    assert "Invariant violations (strict `prefix_merge`): 0 over 2 sessions." in text
    assert "one segment per conversation thread: 1 of 1 successful sessions." in text
    assert "Failed (stderr tails in `bench/results.json`): kimi-k2/claude-code/exact, " in text
    assert "kimi-k2 (no registry ships Kimi's vocabulary)" in text
    assert "glm-4.5 (no registry ships GLM's vocabulary)" in text
    assert "(180 s)" in text and "took 1.5 min" in text


def test_a_harness_that_ran_then_a_bench_error_says_both() -> None:
    row = RunRow("qwen3", "pi", "exact", "ok", error="TimeoutError: records").to_json()
    text = "\n".join(SECTIONS["fidelity"](_result() | {"rows": [row]}))
    assert "| qwen3 | pi | exact | ok, bench error | - |" in text
    assert "Failed (stderr tails in `bench/results.json`): qwen3/pi/exact." in text


def test_failed_calls_are_counted_apart() -> None:
    fidelity = FidelityRow("qwen3.5", "codex", "exact")
    row = RunRow("qwen3.5", "codex", "exact", "exit 1", 1.0, 1, failed_calls=1, fidelity=fidelity)
    line = "\n".join(SECTIONS["fidelity"](_result() | {"rows": [row.to_json()]}))
    assert (
        "| qwen3.5 | codex | exact | exit 1, 1 failed call | 0 | 0 | 0 | 0 | 0 | 0 | 0 | - |"
        in line
    )


def test_a_matrix_on_vllm_has_its_own_section_and_says_what_it_served() -> None:
    families = {"qwen3-coder": {"stand_in": "", "not_covered": "a mixture of experts"}}
    on_vllm = _result() | {"engine": "vllm", "families": families}
    data = {"benchmarks": {"fidelity": _result(), "fidelity-vllm": on_vllm}}
    lines = [
        line for name in data["benchmarks"] for line in SECTIONS[name](data["benchmarks"][name])
    ]
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == [
        HEADING,
        "## Model families on vLLM (`rollstream bench fidelity --engine vllm`)",
    ]
    text = "\n".join(lines)
    assert text.count("a real vLLM (`rollstream engine`") == 1
    assert text.count("reference backend's scripted policy serving the family") == 1
    assert (
        "On the nearest architecture the CPU build runs: qwen3-coder: a mixture of experts." in text
    )


def test_bench_all_runs_it_last() -> None:
    assert ORDER[-1] == "fidelity"
    group = cli.commands["bench"]
    assert "fidelity" in getattr(group, "commands", {})


def test_names_are_checked() -> None:
    assert parse_names("all", ("a", "b"), "x") == ("a", "b")
    assert parse_names(" b , a", ("a", "b"), "x") == ("b", "a")
    assert parse_modes("exact") == ("exact",)
    with pytest.raises(ValueError, match="unknown families nope; known: a, b"):
        parse_names("a,nope", ("a", "b"), "families")
    outcome = CliRunner().invoke(cli, ["bench", "fidelity", "--families", "nope"])
    assert outcome.exit_code == 2 and "unknown families nope" in outcome.output


def test_an_exact_context_the_upstream_check_refused_is_named() -> None:
    refused = RunRow(
        "llama-3",
        "pi",
        "exact",
        "ok",
        exact_refused="exact context refused: templates disagree at id 24",
    )
    text = "\n".join(SECTIONS["fidelity"](_result() | {"rows": [refused.to_json()] * 2}))
    expected = "- llama-3: exact context refused by the interceptor's upstream check (its calls "
    assert text.count(expected + "went as messages): templates disagree at id 24") == 1
