"""The exact-context ablation table: each real-harness pair of runs adds a row, printed at the end.

A row compares one harness's session in both modes: its calls, its conversation threads, and
how many segments ``prefix_merge`` makes of it in exact and in ordinary mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple, dataclass

import pytest

from rollstream.consumers.reconstruct.fidelity import FidelityRow
from tests import run_tables


@dataclass(frozen=True)
class AblationRow:
    """One harness, both modes."""

    harness: str
    calls: int
    threads: int
    exact_segments: int
    ordinary_segments: int


AblationReport = Callable[[AblationRow], None]

#: The tables these tests fill, printed at the end of the run by the root conftest.
ABLATION = run_tables.Table(
    "exact-context ablation (prefix_merge segments)",
    ("harness", "calls", "threads", "exact", "ordinary"),
    ("---", "---:", "---:", "---:", "---:"),
)
FIDELITY = run_tables.Table(
    "model families x harnesses (prefix_merge)",
    (
        "family",
        "harness",
        "mode",
        "calls",
        "threads",
        "segments",
        "breaks",
        "violations",
        "trainable",
        "exact calls",
        "gap calls",
        "gap tokens",
    ),
    ("---", "---", "---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---:"),
)


@pytest.fixture
def ablation_report(request: pytest.FixtureRequest) -> AblationReport:
    """``ablation_report(AblationRow(...))`` adds a row to the table printed after the run."""
    return lambda row: run_tables.add_row(request.node, ABLATION, astuple(row))


FidelityReport = Callable[[FidelityRow], None]


def _fidelity_cells(r: FidelityRow) -> list[object]:
    breaks = ", ".join(f"{k} {v}" for k, v in sorted(r.breaks.items())) or "0"
    return [
        r.family,
        r.harness,
        r.mode,
        r.calls,
        r.threads,
        r.segments,
        breaks,
        r.violations,
        r.trainable_tokens,
        r.exact_calls,
        r.gap_calls,
        r.gap_tokens,
    ]


@pytest.fixture
def fidelity_report(request: pytest.FixtureRequest) -> FidelityReport:
    """``fidelity_report(row)`` adds a row to the family fidelity table printed after the run."""
    return lambda row: run_tables.add_row(request.node, FIDELITY, _fidelity_cells(row))
