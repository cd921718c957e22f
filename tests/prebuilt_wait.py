"""The suite's side of the set-up's builds: wait for them before a test's timeout starts.

A test marked ``@pytest.mark.prebuilt(NAME, ...)`` (the Compose test; every user of the
``docker_base`` fixture, through conftest) needs a build made once per machine
(rollstream.dev.prebuilt). This plugin waits for it around the test's whole run protocol, outside
pytest-timeout's timer (its hook wraps the protocol too; ours is outermost), with the build's own
bound. Once per worker: a build found unavailable skips every test needing it, saying why; one
that failed fails them with its log's tail. The waits are listed at the end of the run.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import cast

import pytest

from rollstream.dev import prebuilt
from rollstream.settings import StatePaths

#: The outcome of each build this worker waited for.
_outcomes: dict[str, prebuilt.Outcome] = {}
_failed = pytest.StashKey[str]()
_PROPERTY = "prebuilt"


def _registry() -> dict[str, prebuilt.Prebuilt]:
    return prebuilt.registry(StatePaths())


def needed(item: pytest.Item) -> list[str]:
    """The builds ``item`` is marked as needing, in order, each once."""
    return list(dict.fromkeys(name for m in item.iter_markers("prebuilt") for name in m.args))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, None]:
    """Wait for what ``item`` needs, then run its protocol (timed by pytest-timeout)."""
    names = needed(item)
    if names:
        known = _registry()
        for name in names:
            if name not in known:
                item.stash[_failed] = f"no such set-up build: {name!r} (known: {sorted(known)})"
                break
            if name not in _outcomes:
                _outcomes[name] = outcome = prebuilt.wait(known[name], StatePaths())
                item.user_properties.append(
                    (_PROPERTY, (name, outcome.state, round(outcome.waited_s, 1)))
                )
            outcome = _outcomes[name]
            if outcome.state == "unavailable":
                item.add_marker(pytest.mark.skip(reason=f"set-up build {name}: {outcome.detail}"))
                break
            if outcome.state == "failed":
                item.stash[_failed] = f"set-up build {name} failed: {outcome.detail}"
                break
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test whose build failed, with what its log said."""
    failed = item.stash.get(_failed, None)
    if failed is not None:
        pytest.fail(failed, pytrace=False)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Each set-up build: ready, or not yet (the waits come before the tests that need it)."""
    lines = []
    for name, item in _registry().items():
        state = (
            "ready" if item.ready() else f"not ready yet (usually {item.usually} the first time)"
        )
        lines.append(f"set-up build {name}: {state}")
    return lines


_waits: list[tuple[str, str, str, float]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the waits the workers report (under pytest-xdist the reports carry them)."""
    if report.when != "setup":
        return
    for key, value in report.user_properties:
        if key == _PROPERTY:
            name, state, waited = cast(tuple[str, str, float], value)
            _waits.append((report.nodeid, str(name), str(state), float(waited)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How long the tests waited for the set-up's builds, and how each wait ended."""
    if not _waits:
        return
    terminalreporter.section("waits for set-up builds (outside the tests' timeouts)")
    for nodeid, name, state, waited in _waits:
        terminalreporter.write_line(f"{name}: {state} after {waited:.0f}s, before {nodeid}")
