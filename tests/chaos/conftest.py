"""The reliability suite's table: each fault test adds a row; the run ends by printing them.

``make chaos`` runs this folder; ``make test`` runs it too (it is part of the suite). A row says
what was done (fault), under what load, and what was counted afterwards: calls or records
lost, trajectories or scores duplicated, and the errors the harnesses (or clients) saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class ChaosRow:
    """One fault and what it cost."""

    fault: str
    load: str
    lost: int
    duplicated: int
    errors: str  # what harnesses or clients saw, e.g. "0" or "3 x 502 (expected)"


_ROWS: list[ChaosRow] = []

ChaosReport = Callable[..., ChaosRow]


@pytest.fixture
def chaos_report() -> ChaosReport:
    """``chaos_report(fault=..., load=..., lost=0, duplicated=0, errors="0")`` adds a row."""

    def add(fault: str, load: str, lost: int, duplicated: int, errors: str) -> ChaosRow:
        row = ChaosRow(fault, load, lost, duplicated, errors)
        _ROWS.append(row)
        return row

    return add


def chaos_table(rows: list[ChaosRow]) -> list[str]:
    """The rows as a Markdown table (what the closing note quotes)."""
    lines = [
        "| fault | load | lost | duplicated | errors seen by harnesses |",
        "|---|---|---:|---:|---|",
    ]
    lines += [f"| {r.fault} | {r.load} | {r.lost} | {r.duplicated} | {r.errors} |" for r in rows]
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the table after the run, whatever else ran."""
    if _ROWS:
        terminalreporter.section("reliability suite")
        for line in chaos_table(_ROWS):
            terminalreporter.write_line(line)
