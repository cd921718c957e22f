"""Tables that tests fill row by row, printed at the end of the run, carried in test reports.

A row travels in its test's ``user_properties``, which pytest-xdist sends from a worker to the
controller with each report. The root conftest collects rows as reports arrive and prints every
table at the end, so the tables are whole whether the run is split over processes or not (the
controller never imports the folders' conftests: a table is described by its rows alone).
The module is a pytest plugin: the root conftest takes its two hooks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import pytest

_KEY = "rollstream.table_row"


@dataclass(frozen=True)
class Table:
    """A Markdown table: its section title, header cells and alignment rules (``---:``)."""

    title: str
    columns: tuple[str, ...]
    rules: tuple[str, ...]

    def head(self) -> list[str]:
        """The header and rule lines."""
        return [_line(self.columns), _line(self.rules)]


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def add_row(node: pytest.Item, table: Table, cells: Sequence[object]) -> None:
    """Attach a row of ``table`` to this test's report (as plain strings: execnet sends them)."""
    assert len(cells) == len(table.columns), (table.title, cells)
    value = (table.title, list(table.columns), list(table.rules), [str(c) for c in cells])
    node.user_properties.append((_KEY, value))


_TABLES: dict[str, Table] = {}
_ROWS: dict[str, list[list[str]]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the rows a test's call carried (once per test: the call phase's report)."""
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name != _KEY:
            continue
        title, columns, rules, cells = cast(tuple[str, list[str], list[str], list[str]], value)
        _TABLES.setdefault(title, Table(title, tuple(columns), tuple(rules)))
        _ROWS.setdefault(title, []).append(cells)


def lines(title: str) -> list[str]:
    """Table ``title`` as Markdown lines, its rows in the order their tests ended; [] if none."""
    if title not in _ROWS:
        return []
    return [*_TABLES[title].head(), *(_line(cells) for cells in _ROWS[title])]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print every table that got rows, each in its own section, whatever ran."""
    for title in _ROWS:
        terminalreporter.section(title)
        for line in lines(title):
            terminalreporter.write_line(line)
