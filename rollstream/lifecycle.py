"""Running async services from the command line: clean stop on SIGTERM/SIGINT.

The first signal asks the service to stop (it finishes what it holds and closes its clients);
a second one kills the process at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class StopSignal:
    """Set when the process is asked to stop; ``stopping()`` is cheap to poll."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._received = 0

    def stopping(self) -> bool:
        """Whether a stop was requested."""
        return self.event.is_set()

    def _on_signal(self, signum: int) -> None:
        self._received += 1
        if self._received > 1:
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info("%s: stopping (again to kill)", signal.Signals(signum).name)
        self.event.set()


def run_service[T](main: Callable[[StopSignal], Awaitable[T]]) -> T:
    """Run ``main(stop)`` in a new event loop with SIGINT/SIGTERM wired to ``stop``."""

    async def runner() -> T:
        stop = StopSignal()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop._on_signal, signum)
        try:
            return await main(stop)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(ValueError, RuntimeError):
                    loop.remove_signal_handler(signum)

    return asyncio.run(runner())


#: How a service's announcement starts: ``rollstream listening: NAME=URL [NAME=URL ...]``.
LISTENING = "rollstream listening:"


def announce(**urls: str) -> None:
    """Say on stderr where this service listens, once it does, in a line programs read.

    A service asked for port 0 binds it itself; whoever started it (the local stack) reads the
    port it got from this line (:func:`announced`) instead of handing it a guess.
    """
    words = " ".join(f"{name}={url}" for name, url in urls.items())
    print(f"{LISTENING} {words}", file=sys.stderr, flush=True)


def announced(text: str) -> dict[str, str]:
    """The URLs of the announcements in a service's output (empty before its first)."""
    urls: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(LISTENING):
            urls |= dict(w.split("=", 1) for w in line[len(LISTENING) :].split() if "=" in w)
    return urls


_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """In a child before exec: receive ``signum`` when the parent dies (Linux), however it dies.

    A test run killed by a timeout leaves no broker behind; a node SIGKILLed leaves no harness
    calling the interceptor for a session nobody will end.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum)
