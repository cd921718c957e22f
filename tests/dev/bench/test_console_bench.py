"""The console benchmark: a small run's numbers hold together, and its section renders them."""

from __future__ import annotations

from rollstream.dev.bench.console import ConsoleBenchConfig, run_console_bench
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.suite import ORDER


def test_a_small_run() -> None:
    config = ConsoleBenchConfig(sessions=200, calls=5, group_size=4, repeats=2, decode_sample=200)
    lines: list[str] = []
    result = run_console_bench(config, lines.append)
    assert result["ingest"]["records"] == 200 * (5 + 3)  # calls, start, end, scored
    assert result["indexed"] == 200
    requests = {r["request"]: r for r in result["requests"]}
    whole = result["whole_session_list"]["bytes"]
    # A page of 50 of 200 sessions is about a quarter of the whole list (plus its facets).
    page = requests["sessions, page of 50"]["bytes"]
    assert 0.2 * whole < page < 0.35 * whole
    # A group's 4 sessions: a twelfth of a page of 50 and its facets, give or take.
    assert requests["sessions, filtered by group"]["bytes"] < page / 5
    assert requests["groups, page of 20"]["bytes"] > 0 and result["ingest"]["held_mb"] > 0
    assert "console" in ORDER
    section = "\n".join(SECTIONS["console"](result))
    assert "## The console at scale" in section and f"{whole:,} bytes" in section
