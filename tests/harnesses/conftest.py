"""The exact-context ablation table: each real-harness pair of runs adds a row, printed at the end.

A row compares one harness's session in both modes: its calls, its conversation threads, and
how many segments ``prefix_merge`` makes of it in exact and in ordinary mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class AblationRow:
    """One harness, both modes."""

    harness: str
    calls: int
    threads: int
    exact_segments: int
    ordinary_segments: int


_ROWS: list[AblationRow] = []

AblationReport = Callable[[AblationRow], None]


@pytest.fixture
def ablation_report() -> AblationReport:
    """``ablation_report(AblationRow(...))`` adds a row to the table printed after the run."""
    return _ROWS.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the table after the run, whatever else ran."""
    if not _ROWS:
        return
    terminalreporter.section("exact-context ablation (prefix_merge segments)")
    terminalreporter.write_line("| harness | calls | threads | exact | ordinary |")
    terminalreporter.write_line("|---|---:|---:|---:|---:|")
    for r in _ROWS:
        terminalreporter.write_line(
            f"| {r.harness} | {r.calls} | {r.threads} | {r.exact_segments} "
            f"| {r.ordinary_segments} |"
        )
