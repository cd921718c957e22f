"""The reliability suite's table: each fault test adds a row; the run ends by printing them.

Fault tests live in ``tests/chaos`` (``make chaos``), and a few beside what they break (the
secure stack's interceptor pool); ``make test`` runs them all. A row says what was done
(fault), under what load, and what was counted afterwards: calls or records lost, trajectories
or scores duplicated, and the errors the harnesses (or clients) saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple, dataclass

import pytest

from tests import run_tables


@dataclass(frozen=True)
class ChaosRow:
    """One fault and what it cost."""

    fault: str
    load: str
    lost: int
    duplicated: int
    errors: str  # what harnesses or clients saw, e.g. "0" or "3 x 502 (expected)"


ChaosReport = Callable[..., ChaosRow]

#: The fault table, printed at the end of the run by the root conftest.
TABLE = run_tables.Table(
    "reliability suite",
    ("fault", "load", "lost", "duplicated", "errors seen by harnesses"),
    ("---", "---", "---:", "---:", "---"),
)


@pytest.fixture
def chaos_report(request: pytest.FixtureRequest) -> ChaosReport:
    """``chaos_report(fault=..., load=..., lost=0, duplicated=0, errors="0")`` adds a row."""

    def add(fault: str, load: str, lost: int, duplicated: int, errors: str) -> ChaosRow:
        row = ChaosRow(fault, load, lost, duplicated, errors)
        run_tables.add_row(request.node, TABLE, astuple(row))
        return row

    return add
