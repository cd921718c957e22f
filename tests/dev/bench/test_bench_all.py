"""``bench all`` runs the benchmarks that exist, in order, and writes RESULTS.md once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.cli.bench import all_benchmarks
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.settings import KafkaSettings

BACKEND_RESULT: dict[str, Any] = {
    "config": {"policy": "tiny", "max_tokens": 5, "ttft_ms": 1.0, "tpot_ms": 1.0},
    "levels": [
        {
            "concurrency": 1,
            "tokens_per_s": 10.0,
            "errors": 0,
            "ttft_p50_ms": 1.0,
            "ttft_p99_ms": 1.0,
            "itl_p50_ms": 1.0,
            "itl_p99_ms": 1.0,
            "server_cpu_us_per_token": 1.0,
            "server_cpu_utilisation": 0.1,
            "server_rss_mb": 1.0,
        }
    ],
}


def _group(calls: list[tuple[str, Path]]) -> click.Group:
    """A bench group of stubs: backend records a result, node fails, extra is not in the order."""

    def stub(name: str) -> click.Command:
        @click.command(name=name)
        @click.option("--json", "json_path", type=click.Path(path_type=Path), required=True)
        @click.option("--markdown", type=click.Path(path_type=Path), required=True)
        def command(json_path: Path, markdown: Path) -> None:
            calls.append((name, markdown))
            if name == "node":
                raise RuntimeError("node broke")
            write_markdown(record(json_path, name, BACKEND_RESULT), markdown)

        return command

    group = click.Group("bench")
    for name in ("extra", "node", "backend", "reconstruct"):
        group.add_command(stub(name))
    group.add_command(all_benchmarks)
    return group


@pytest.mark.integration
def test_runs_in_order_and_writes_markdown_once(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    calls: list[tuple[str, Path]] = []
    results, markdown = tmp_path / "results.json", tmp_path / "RESULTS.md"
    outcome = CliRunner().invoke(
        _group(calls),
        ["all", "--json", str(results), "--markdown", str(markdown), "--skip", "reconstruct"],
        env={"ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers},
    )
    assert outcome.exit_code == 1, outcome.output
    assert "failed: node" in outcome.output and "node broke" in outcome.output
    assert [name for name, _ in calls] == ["backend", "node"]  # ORDER, skips, unknown names
    assert all(scratch != markdown for _, scratch in calls)  # each rewrote a scratch copy
    data = json.loads(results.read_text())
    assert list(data["benchmarks"]) == ["backend"]
    assert (data["all"]["ran"], data["all"]["failed"]) == (["backend"], ["node"])
    text = markdown.read_text()
    assert text.index("Machine: ") < text.index("## Reference backend")
    assert "Failed (sections left from earlier runs): node." in text


def test_stops_before_running_anything_without_a_broker(tmp_path: Path) -> None:
    calls: list[tuple[str, Path]] = []
    outcome = CliRunner().invoke(
        _group(calls),
        ["all", "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "R.md")],
        env={"ROLLSTREAM_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert outcome.exit_code == 1
    assert "no Kafka broker answers at 127.0.0.1:1" in outcome.output
    assert calls == [] and not (tmp_path / "r.json").exists()


def test_registered_under_bench() -> None:
    group = cli.commands["bench"]
    assert isinstance(group, click.Group)
    assert {"publisher", "cluster", "pipeline", "instances", "all"} <= set(group.commands)
