"""``rollstream harness run`` with the command preset (no npm install needed)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rollstream.cli import cli


def test_harness_run_command_preset_with_options(tmp_path: Path) -> None:
    work = tmp_path / "work"
    script = "echo {instruction} > out.txt; echo $ROLLSTREAM_SESSION >> out.txt"
    args = ["harness", "run", "command", "say hi", "--workdir", str(work), "--session", "s-1"]
    result = CliRunner().invoke(cli, [*args, "--option", f"command={script}"])
    assert result.exit_code == 0, result.output
    assert (work / "out.txt").read_text() == "say hi\ns-1\n"
    assert "session s-1: exit 0" in result.output


def test_harness_run_rejects_malformed_options(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["harness", "run", "command", "x", "--option", "novalue"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
