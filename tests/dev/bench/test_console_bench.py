"""The console benchmark: a small run's numbers hold together, and its section renders them."""

from __future__ import annotations

from rollstream.dev.bench.console import ConsoleBenchConfig, run_console_bench
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.suite import ORDER


def test_a_small_run() -> None:
    config = ConsoleBenchConfig(sessions=40, calls=5, group_size=4, repeats=2, decode_sample=200)
    lines: list[str] = []
    result = run_console_bench(config, lines.append)
    assert result["ingest"]["records"] == 40 * (5 + 3)  # calls, start, end, scored
    assert result["indexed"] == 40
    requests = {r["request"]: r for r in result["requests"]}
    whole = result["whole_session_list"]["bytes"]
    # A page is a page: its share of the whole list is its rows' share.
    page = requests["sessions, page of 50"]["bytes"]
    assert page >= whole * 0.9  # 40 sessions: the page is all of them, with its facets
    assert requests["sessions, filtered by group"]["bytes"] < page / 5
    ingest = result["ingest"]
    # Held memory is counted once and divided: a session's share is its five calls' shares.
    assert ingest["held_mb"] > 0
    assert abs(ingest["bytes_per_session"] - 5 * ingest["bytes_per_call"]) <= 5
    assert "console" in ORDER
    section = "\n".join(SECTIONS["console"](result))
    assert "## The console at scale" in section and f"{whole:,} bytes" in section
