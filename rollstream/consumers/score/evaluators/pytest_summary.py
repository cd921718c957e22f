"""Per-test outcomes from pytest's ``-rA`` short summary, for the tests an evaluator asked about.

pytest prints one line per test there: ``PASSED <node id>`` or ``FAILED <node id> - <message>``
(also ``ERROR``, ``XFAIL``, ``XPASS``). A node id may itself contain spaces and `` - `` (a
parametrized string), so lines are matched against the ids asked about rather than split.
A test counts as passed when it PASSED or XFAILed, as the SWE-bench harness counts it; one that
never appears did not run (``missing``), which fails it as well.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: Outcomes that count as the test passing.
PASSING = frozenset({"PASSED", "XFAIL"})
MISSING = "MISSING"
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (.+)$")
_SEPARATOR = " - "


def outcomes(output: str, tests: Iterable[str]) -> dict[str, str]:
    """Each of ``tests``'s outcome in ``output`` (``MISSING`` when pytest did not report it).

    A test reported twice (a rerun plugin) keeps its last outcome.
    """
    wanted = set(tests)
    found: dict[str, str] = {}
    for line in output.splitlines():
        match = _LINE.match(line.rstrip())
        if match is None:
            continue
        status, rest = match.groups()
        if rest in wanted:
            found[rest] = status
            continue
        # ``<id> - <message>``: the id is the part before one of the separators, the longest
        # one asked about (an id may contain the separator, and so may the message).
        end = rest.rfind(_SEPARATOR)
        while end != -1:
            if rest[:end] in wanted:
                found[rest[:end]] = status
                break
            end = rest.rfind(_SEPARATOR, 0, end)
    return {test: found.get(test, MISSING) for test in wanted}


def passed(results: Mapping[str, str], tests: Iterable[str]) -> list[str]:
    """Those of ``tests`` that passed."""
    return [t for t in tests if results.get(t, MISSING) in PASSING]
