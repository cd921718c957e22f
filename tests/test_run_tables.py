"""The end-of-run tables hold every row when the run is split over pytest-xdist workers.

(The reliability suite runs in one process in ``make test`` and prints its table that way.)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]

# As in the real suite, the rows come from a fixture in a folder's conftest, which the xdist
# controller (it collects nothing) never imports.
FOLDER_CONFTEST = """
import pytest
from tests import run_tables

TABLE = run_tables.Table("demo table", ("name", "n"), ("---", "---:"))

@pytest.fixture
def report(request):
    return lambda name, n: run_tables.add_row(request.node, TABLE, (name, n))
"""

TESTS = """
import pytest

@pytest.mark.parametrize("n", range(4))
def test_row(report, n):
    report(f"row-{n}", n * 10)
"""


def test_every_row_of_two_workers_reaches_the_printed_table(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    folder = pytester.mkpydir("folder")
    (folder / "conftest.py").write_text(FOLDER_CONFTEST)
    (folder / "test_rows.py").write_text(TESTS)
    result = pytester.runpytest_subprocess("-p", "tests.run_tables", "-n", "2")
    result.assert_outcomes(passed=4)
    out = result.stdout.lines
    head = out.index("| name | n |")
    assert out[head + 1] == "| --- | ---: |"
    assert sorted(out[head + 2 : head + 6]) == [f"| row-{n} | {n * 10} |" for n in range(4)]
    assert any("demo table" in line for line in out[:head])


def test_the_time_by_group_names_each_group_once_with_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(
        test_groups="""
import time, pytest

@pytest.mark.xdist_group("slow")
@pytest.mark.parametrize("n", range(3))
def test_slow(n):
    time.sleep(0.4)

@pytest.mark.parametrize("n", ["a@b", "c"])
def test_free(n):
    pass
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "tests.group_times", "-n", "2", "--dist", "loadgroup"
    )
    result.assert_outcomes(passed=5)
    lines = result.stdout.lines
    head = next(i for i, line in enumerate(lines) if "time by test group" in line)
    rows = {line.split()[0]: line.split()[1:] for line in lines[head + 2 : head + 4]}
    assert set(rows) == {"slow", "ungrouped"}
    assert rows["slow"][0] == "3" and rows["ungrouped"][0] == "2"
    assert rows["slow"][2] >= "0:01"  # three 0.4 s tests on one worker, one after another
