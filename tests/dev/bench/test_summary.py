"""The benchmark summary table: generated from the results JSON, so it cannot drift."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.bench.results_file import write_markdown
from rollstream.dev.bench.summary import END, START, main, replace_table, summary_table
from rollstream.errors import ConfigurationError

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results.json"


@pytest.fixture
def data() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(RESULTS.read_text())
    return loaded


def test_each_row_reads_its_numbers_from_the_results(data: dict[str, Any]) -> None:
    before = "\n".join(summary_table(data))
    changed = copy.deepcopy(data)
    changed["benchmarks"]["node"]["modes"][1]["sessions_per_min"] = 12345.0
    assert "12,345 sessions/min" in "\n".join(summary_table(changed))
    assert "12,345 sessions/min" not in before


def test_the_reconstruction_row_gives_the_long_session_costs(data: dict[str, Any]) -> None:
    long = data["benchmarks"]["reconstruct"].setdefault("long_sessions", {})
    long["sessions"] = [
        {"calls": 100, "ms_per_call": 0.5, "context_tokens_last": 99_000},
        {"calls": 10_000, "ms_per_call": 0.25, "context_tokens_last": 101_000},
    ]
    row = next(line for line in summary_table(data) if line.startswith("| reconstruction"))
    assert "0.50 ms at 100, 0.25 ms at 10,000 calls" in row and "101k tokens" in row


def test_a_benchmark_without_results_has_no_row(data: dict[str, Any]) -> None:
    del data["benchmarks"]["pipeline"]
    table = summary_table(data)
    assert not any("through Kafka |" in line for line in table)
    assert table[0] == START and table[-1] == END


def test_replacing_keeps_the_text_around_the_markers(data: dict[str, Any]) -> None:
    text = f"intro\n{START}\nold\n{END}\noutro\n"
    new = replace_table(text, summary_table(data))
    assert new.startswith("intro\n") and new.endswith("\noutro\n") and "old" not in new
    with pytest.raises(ConfigurationError, match="markers"):
        replace_table("no markers here", summary_table(data))


def test_a_bench_run_writes_the_summary_at_the_top_of_results(
    tmp_path: Path, data: dict[str, Any]
) -> None:
    results = tmp_path / "RESULTS.md"
    write_markdown(data, results)
    text = results.read_text()
    assert "\n".join(summary_table(data)) in text
    assert text.index(START) < text.index("\n## ", text.index(END))  # before the sections


def test_check_fails_on_a_stale_table(tmp_path: Path, data: dict[str, Any]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\n| what | result |\n{END}\n")
    assert main(["--results", str(RESULTS), "--check", str(readme)]) == 1
    assert main(["--results", str(RESULTS), "--write", str(readme)]) == 0
    assert main(["--results", str(RESULTS), "--check", str(readme)]) == 0
