"""The demo's small agent runs the commands the model asks for, in either form they come."""

from __future__ import annotations

from pathlib import Path

from rollstream.dev.demo.agent import shell


async def test_an_argument_list_runs_as_a_program_with_its_arguments(tmp_path: Path) -> None:
    # The reference backend's scripted policy writes Codex's form: ["bash", "-lc", "..."].
    out = await shell(["bash", "-lc", "echo polar > hello.txt"], tmp_path)
    assert out.endswith("(exit 0)")
    assert (tmp_path / "hello.txt").read_text() == "polar\n"


async def test_a_string_runs_as_a_shell_line(tmp_path: Path) -> None:
    out = await shell("echo one; exit 3", tmp_path)
    assert out.startswith("one\n") and out.endswith("(exit 3)")


async def test_nothing_to_run_is_an_empty_shell_line(tmp_path: Path) -> None:
    assert (await shell(None, tmp_path)).endswith("(exit 0)")
