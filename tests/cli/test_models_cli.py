"""``rollstream models``: the families --family accepts, and their vocabularies."""

from __future__ import annotations

from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.models.families import FAMILIES


def test_families_lists_every_family_with_its_renderer_and_vocabulary() -> None:
    result = CliRunner().invoke(cli, ["models", "families"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name, spec in FAMILIES.items():
        line = next(line for line in lines if line.startswith(f"{name}:"))
        assert f"renderer {spec.renderer}" in line and f"vocabulary {spec.vocabulary}" in line
        assert ("stand-in" in line) == bool(spec.stand_in)
    assert lines[-1].startswith("generic:")


def test_an_unknown_family_for_the_backend_lists_the_known_ones() -> None:
    result = CliRunner().invoke(cli, ["backend", "--family", "qwen9", "--port", "0"])
    assert result.exit_code != 0
    assert "unknown model family 'qwen9'" in result.output and "qwen3-coder" in result.output
