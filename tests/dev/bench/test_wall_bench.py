"""The wall benchmark at tiny sizes: both modes measured, ratios from the medians, a section."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.wall import MODES, WallBenchConfig, run_wall_bench


async def test_a_small_run_measures_both_modes_and_their_ratio() -> None:
    config = WallBenchConfig(starts=2, exchanges=20, connections=5, bulk_mb=2, rounds=2)
    said: list[str] = []
    result = await run_wall_bench(config, said.append)
    assert set(result["modes"]) == set(MODES)
    keys = {"start_ms", "round_trip_p50_us", "round_trip_p99_us", "connect_us", "bulk_mb_per_s"}
    for mode in MODES:
        assert set(result["modes"][mode]) == keys
        assert all(v > 0 for v in result["modes"][mode].values())
    for key in keys:
        expected = result["modes"]["walled"][key] / result["modes"]["direct"][key]
        assert abs(result["walled_over_direct"][key] - expected) < 0.01
    # Two rounds, each mode once per round, the order alternating.
    assert [line.split()[2] for line in said] == ["direct:", "walled:", "walled:", "direct:"]
    section = "\n".join(SECTIONS["wall"](result))
    assert "## Network wall (`rollstream bench wall`)" in section
    assert "| a harness process from spawn to exit |" in section


def test_the_command_records_its_results(tmp_path: Path) -> None:
    json_path, markdown = tmp_path / "r.json", tmp_path / "R.md"
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "wall",
            "--rounds",
            "1",
            "--starts",
            "1",
            "--json",
            str(json_path),
            "--markdown",
            str(markdown),
        ],
    )
    assert result.exit_code == 0, result.output
    assert '"wall"' in json_path.read_text()
    assert "Network wall" in markdown.read_text()
