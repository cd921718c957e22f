"""The sessions an interceptor in strict mode accepts calls for, kept across restarts.

Whoever launches harnesses registers each session before the harness starts and forgets it
once it ended (the rollout node does, through the admin port). The set is journalled to a file
(``+id`` / ``-id`` lines, one fsync each: a session is registered once, not per call) and
compacted when loaded, so an interceptor restarted mid-run still accepts the sessions running.
"""

from __future__ import annotations

import os
from pathlib import Path

from rollstream.errors import RollstreamError


class RegistryError(RollstreamError):
    """A session id that cannot be registered, or a journal that cannot be written."""


class SessionRegistry:
    """A set of session ids, journalled to ``path`` when one is given."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._sessions: set[str] = set()
        if path is not None:
            self._load(path)

    def __contains__(self, session: object) -> bool:
        return session in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def register(self, session: str) -> None:
        """Accept calls of ``session`` from now on."""
        _check(session)
        if session not in self._sessions:
            self._append(f"+{session}\n")
            self._sessions.add(session)

    def forget(self, session: str) -> None:
        """Refuse calls of ``session`` from now on."""
        if session in self._sessions:
            self._append(f"-{session}\n")
            self._sessions.discard(session)

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            if line.startswith("+"):
                self._sessions.add(line[1:])
            elif line.startswith("-"):
                self._sessions.discard(line[1:])
        # Compact: a journal of the live sessions only, replaced atomically.
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(f"+{s}\n" for s in sorted(self._sessions)))
        with tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        tmp.replace(path)

    def _append(self, line: str) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise RegistryError(f"cannot write the session registry {self.path}: {exc}") from exc


def _check(session: str) -> None:
    if not session or session != session.strip() or any(c in session for c in "\r\n"):
        raise RegistryError("a session id must be non-empty, one line, without outer spaces")
