"""Real vLLM servers for the tests: one per family per run, shared, one at a time.

A test that takes the ``engine_servers`` fixture is marked (conftest): it needs the set-up's
``engine`` build (vLLM installed, waited for outside its timeout), runs in the ``engine`` group
(one worker starts the servers, each family once: the group comes sorted by family) and is
timed without its fixtures' set-up (``timeout(func_only=True)``): a server's start, 45 s to
3 min on these CPUs (torch and vLLM imported twice, the model loaded), has its own bound
(EngineSettings.start_timeout_s) and fails the test with the server's log when it is exceeded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rollstream.dev.engine.real_model import REAL_MODELS
from rollstream.dev.engine.serve import EngineServer, EngineSettings
from rollstream.settings import StatePaths

#: Servers a worker keeps at once: each takes about 5.5 GB of the machine's 24, and the tests
#: come sorted by family (conftest), so one is enough.
AT_ONCE = 1


class EngineServers:
    """``get(family)``: that family's server (or a real model's), started first if not running."""

    def __init__(self) -> None:
        self._running: dict[str, EngineServer] = {}
        self._failed: dict[str, str] = {}

    def get(self, family: str) -> EngineServer:
        """The running server of ``family`` (the least recently used one stops past AT_ONCE)."""
        if family in self._failed:
            pytest.fail(self._failed[family], pytrace=False)
        if family in self._running:
            server = self._running.pop(family)
            self._running[family] = server  # most recently used last
            return server
        while len(self._running) >= AT_ONCE:
            oldest = next(iter(self._running))
            self._running.pop(oldest).stop()
        settings = (
            EngineSettings(real_model=family)
            if family in REAL_MODELS
            else EngineSettings(family=family)
        )
        server = EngineServer(settings, StatePaths())
        try:
            server.start()
        except Exception as exc:
            self._failed[family] = f"the {family} engine did not start: {exc}"
            pytest.fail(self._failed[family], pytrace=False)
        self._running[family] = server
        return server

    def stop(self) -> None:
        """Stop every server."""
        while self._running:
            self._running.popitem()[1].stop()


@pytest.fixture(scope="session")
def engine_servers() -> Iterator[EngineServers]:
    """The session's vLLM servers, by family."""
    servers = EngineServers()
    try:
        yield servers
    finally:
        servers.stop()
