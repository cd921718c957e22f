"""Which worker of an interceptor pool holds each session.

A session's state (its delta ledger, sequence numbers, exact-context memory, strict-mode
registration) lives in one worker process, so every call of the session must reach that worker.
A registered session is assigned to the least-loaded worker and remembered; a session nobody
registered (a harness the node did not launch) goes where a stable hash of its id says, which
every connection of that session agrees on without any shared state.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable


def hashed_worker(session: str | None, workers: int) -> int:
    """The worker an unregistered session goes to: stable across processes and restarts.

    A connection that names no session (no key in its first request) goes to worker 0.
    """
    if not session:
        return 0
    return zlib.crc32(session.encode()) % workers


class Affinity:
    """Session → worker index for ``workers`` workers; least-loaded assignment, hash fallback."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("a pool has at least one worker")
        self.workers = workers
        self._assigned: dict[str, int] = {}
        self._load = [0] * workers

    def __len__(self) -> int:
        return len(self._assigned)

    def __contains__(self, session: object) -> bool:
        return session in self._assigned

    @property
    def loads(self) -> list[int]:
        """Sessions assigned to each worker."""
        return list(self._load)

    def assigned(self, session: str) -> int | None:
        """The worker the session was assigned to, if any."""
        return self._assigned.get(session)

    def choose(self, session: str, up: Iterable[int] | None = None) -> int:
        """Where ``session`` should be registered: its worker if assigned, else the least loaded.

        ``up`` restricts a new choice to workers that answer (default: all). Ties go to the
        lowest index, so a fresh pool fills its workers in turn. Nothing is remembered until
        ``assign``: a registration the worker refused must not count.
        """
        current = self._assigned.get(session)
        if current is not None:
            return current
        candidates = list(range(self.workers)) if up is None else sorted(up)
        if not candidates:
            candidates = list(range(self.workers))
        return min(candidates, key=lambda i: (self._load[i], i))

    def assign(self, session: str, worker: int) -> None:
        """Remember that ``worker`` holds ``session`` (moving it if it was elsewhere)."""
        if not 0 <= worker < self.workers:
            raise ValueError(f"no worker {worker} in a pool of {self.workers}")
        previous = self._assigned.get(session)
        if previous == worker:
            return
        if previous is not None:
            self._load[previous] -= 1
        self._assigned[session] = worker
        self._load[worker] += 1

    def forget(self, session: str) -> int | None:
        """The session is over: drop its assignment; the worker it had, if any."""
        worker = self._assigned.pop(session, None)
        if worker is not None:
            self._load[worker] -= 1
        return worker

    def worker_of(self, session: str | None) -> int:
        """Where calls of ``session`` go: its assigned worker, else the hashed one."""
        if session is not None and session in self._assigned:
            return self._assigned[session]
        return hashed_worker(session, self.workers)
