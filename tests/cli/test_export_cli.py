"""``rollstream export`` options and ``--since`` parsing, without Kafka."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.cli.options import parse_since, since_option

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", NOW - timedelta(minutes=30)),
        ("2h", NOW - timedelta(hours=2)),
        ("1d", NOW - timedelta(days=1)),
        ("1w", NOW - timedelta(weeks=1)),
        ("90s", NOW - timedelta(seconds=90)),
        ("1h30m", NOW - timedelta(hours=1, minutes=30)),
        ("1.5h", NOW - timedelta(minutes=90)),
        (" 2h ", NOW - timedelta(hours=2)),
        ("2026-11-30", datetime(2026, 11, 30, tzinfo=UTC)),
        ("2026-11-30T08:15:00", datetime(2026, 11, 30, 8, 15, tzinfo=UTC)),
        ("2026-11-30T08:15:00Z", datetime(2026, 11, 30, 8, 15, tzinfo=UTC)),
        ("2026-11-30T08:15:00.250+0000", datetime(2026, 11, 30, 8, 15, 0, 250000, tzinfo=UTC)),
        (
            "2026-11-30T08:15:00+02:00",
            datetime(2026, 11, 30, 8, 15, tzinfo=timezone(timedelta(hours=2))),
        ),
    ],
)
def test_since_is_an_iso_time_or_an_age(text: str, expected: datetime) -> None:
    parsed = parse_since(text, NOW)
    assert parsed == expected and parsed.tzinfo is not None


@pytest.mark.parametrize("text", ["", "2x", "h", "-2h", "yesterday", "2026-13-01"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_since(text, NOW)


def test_an_age_counts_back_from_the_current_time() -> None:
    before = datetime.now(UTC)
    parsed = parse_since("1h")
    assert before - timedelta(hours=1) <= parsed <= datetime.now(UTC) - timedelta(hours=1)


def test_a_bad_since_is_a_usage_error(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(cli, ["export", "--out", str(out), "--since", "soon"])
    assert result.exit_code == 2
    assert "neither an ISO time nor an age" in result.output
    assert not out.exists()


def test_an_out_file_without_a_known_suffix_needs_a_format(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    result = CliRunner().invoke(cli, ["export", "--out", str(out)])
    assert result.exit_code == 1
    assert "give --format jsonl or parquet" in result.output
    assert not out.exists()


def test_help_lists_the_options() -> None:
    result = CliRunner().invoke(cli, ["export", "--help"])
    assert result.exit_code == 0
    for option in ("--topic", "--format", "--out", "--min-reward", "--since", "--follow"):
        assert option in result.output


def test_the_since_option_hands_commands_an_aware_datetime() -> None:
    seen: list[datetime | None] = []

    @click.command()
    @since_option
    def command(since: datetime | None) -> None:
        seen.append(since)

    runner = CliRunner()
    before = datetime.now(UTC)
    for args in (["--since", "2h"], ["--since", "2026-11-30T08:15:00"], []):
        result = runner.invoke(command, args)
        assert result.exit_code == 0, result.output
    relative, absolute, none = seen
    assert relative is not None and relative.tzinfo is not None
    assert abs(relative - (before - timedelta(hours=2))) < timedelta(seconds=5)
    assert absolute == datetime(2026, 11, 30, 8, 15, tzinfo=UTC) and none is None
