"""A generated block between two markers: read, replaced, written, checked."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rollstream.dev.docs_block import DocBlock
from rollstream.errors import ConfigurationError

BLOCK = DocBlock("<!-- t:start -->", "<!-- t:end -->", "the t table", "make t")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    BLOCK.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_body_is_replaced_and_the_text_around_it_kept() -> None:
    text = "intro\n<!-- t:start -->\nold\n\n<!-- t:end -->\noutro\n"
    assert BLOCK.body(text) == "old"
    new = BLOCK.replace(text, "| a |\n| b |")
    assert new == "intro\n<!-- t:start -->\n| a |\n| b |\n<!-- t:end -->\noutro\n"
    assert BLOCK.replace(new, "| a |\n| b |") == new
    assert BLOCK.wrap("x") == "<!-- t:start -->\nx\n<!-- t:end -->"


@pytest.mark.parametrize(
    "text", ["none", "<!-- t:start -->\nonly a start", "<!-- t:end -->\n<!-- t:start -->\n"]
)
def test_missing_markers_are_an_error_naming_them(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"<!-- t:start --> \.\.\. <!-- t:end --> markers"):
        BLOCK.replace(text, "x")


def test_write_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# doc\n<!-- t:start -->\nstale\n<!-- t:end -->\n", encoding="utf-8")
    assert BLOCK.run(_args("--check", str(doc)), "fresh") == 1
    assert f"{doc}: the t table is out of date; run: make t" in capsys.readouterr().err
    assert BLOCK.run(_args("--write", str(doc)), "fresh") == 0
    assert BLOCK.run(_args("--check", str(doc)), "fresh") == 0
    assert doc.read_text(encoding="utf-8") == "# doc\n<!-- t:start -->\nfresh\n<!-- t:end -->\n"
    assert not BLOCK.rewrite(doc, "fresh")  # unchanged: not written again


def test_print_and_a_file_without_markers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert BLOCK.run(_args(), "body") == 0
    assert BLOCK.run(_args(), "body", shown="whole") == 0
    assert capsys.readouterr().out == "body\nwhole\n"
    doc = tmp_path / "doc.md"
    doc.write_text("no markers\n", encoding="utf-8")
    assert BLOCK.run(_args("--write", str(doc)), "x") == 1
    assert "markers for the t table" in capsys.readouterr().err
    assert doc.read_text(encoding="utf-8") == "no markers\n"
