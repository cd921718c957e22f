"""Where the run's minutes go: wall and busy time per test group, printed at the end.

Under ``--dist loadgroup`` a group (cluster, docker, chaos; tests/conftest.py) runs on one worker
in turn, so a long group bounds the run however many workers there are. Each report carries its
phase's start, stop and duration, from the workers too; the controller sums them per group
(pytest-xdist puts the group in the node id after ``@``; a test without one is "ungrouped").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest


@dataclass
class _Group:
    tests: set[str]
    first: float
    last: float
    busy: float


_groups: dict[str, _Group] = {}
#: pytest-xdist's suffix: ``tests/a.py::test_x[p]@docker``.
_GROUP = re.compile(r"@([\w-]+)$")


def group_of(nodeid: str) -> str:
    """The xdist group a node id names, or ``ungrouped``."""
    found = _GROUP.search(nodeid)
    return found.group(1) if found else "ungrouped"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add the phase's time to its group's (setup, call and teardown alike)."""
    name = group_of(report.nodeid)
    group = _groups.get(name)
    if group is None:
        group = _groups[name] = _Group(set(), report.start, report.stop, 0.0)
    group.tests.add(report.nodeid)
    group.first = min(group.first, report.start)
    group.last = max(group.last, report.stop)
    group.busy += report.duration


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per group: tests, first start to last stop, and the sum of their phases."""
    if not _groups:
        return
    terminalreporter.section("time by test group (wall: first start to last stop)")
    terminalreporter.write_line(f"{'group':<12} {'tests':>6} {'wall':>7} {'busy':>7}")
    for name, group in sorted(_groups.items(), key=lambda item: -item[1].busy):
        wall = _minutes(group.last - group.first)
        busy = _minutes(group.busy)
        terminalreporter.write_line(f"{name:<12} {len(group.tests):>6} {wall:>7} {busy:>7}")
