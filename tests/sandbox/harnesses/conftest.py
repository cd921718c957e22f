"""The exact-context ablation table: each real-harness pair of runs adds a row, printed at the end.

A row compares one harness's session in both modes: its calls, its conversation threads, and
how many segments ``prefix_merge`` makes of it in exact and in ordinary mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from rollstream.processing.reconstruct.fidelity import FidelityRow


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


_FIDELITY: list[FidelityRow] = []
FidelityReport = Callable[[FidelityRow], None]


@pytest.fixture
def fidelity_report() -> FidelityReport:
    """``fidelity_report(row)`` adds a row to the family fidelity table printed after the run."""
    return _FIDELITY.append


def _print_fidelity(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.section("model families x harnesses (prefix_merge)")
    terminalreporter.write_line(
        "| family | harness | mode | calls | threads | segments | breaks | violations "
        "| trainable | exact calls | gap calls | gap tokens |"
    )
    terminalreporter.write_line("|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in _FIDELITY:
        breaks = ", ".join(f"{k} {v}" for k, v in sorted(r.breaks.items())) or "0"
        terminalreporter.write_line(
            f"| {r.family} | {r.harness} | {r.mode} | {r.calls} | {r.threads} | {r.segments} "
            f"| {breaks} | {r.violations} | {r.trainable_tokens} | {r.exact_calls} "
            f"| {r.gap_calls} | {r.gap_tokens} |"
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the tables after the run, whatever else ran."""
    if _FIDELITY:
        _print_fidelity(terminalreporter)
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
