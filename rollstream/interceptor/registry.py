"""The sessions an interceptor in strict mode accepts calls for, kept across restarts.

Whoever launches harnesses registers each session before the harness starts and forgets it
once it ended (the rollout node does, through the admin port), optionally with the session's
context mode (exact or ordinary). The set is journalled to a file (``+id`` or ``+id<TAB>mode``
/ ``-id`` lines, one fsync each: a session is registered once, not per call) and compacted when
loaded, so an interceptor restarted mid-run still accepts the sessions running, in their mode.
"""

from __future__ import annotations

from pathlib import Path

from rollstream.durable import append_durably, make_directory, replace_durably
from rollstream.errors import RollstreamError
from rollstream.schemas.calls import ContextMode


class RegistryError(RollstreamError):
    """A session id that cannot be registered, or a journal that cannot be written."""


class SessionRegistry:
    """Session ids and their context modes, journalled to ``path`` when one is given."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._sessions: dict[str, str | None] = {}
        if path is not None:
            self._load(path)

    def __contains__(self, session: object) -> bool:
        return session in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def register(self, session: str, context: str | None = None) -> None:
        """Accept calls of ``session`` from now on, in ``context`` mode if one is given."""
        _check(session)
        if context is not None and context not in set(ContextMode):
            raise RegistryError(f"context must be one of {', '.join(ContextMode)}")
        if session not in self._sessions or self._sessions[session] != context:
            self._append(_line(session, context))
            self._sessions[session] = context

    def context(self, session: str) -> str | None:
        """The context mode the session was registered with, if any."""
        return self._sessions.get(session)

    def forget(self, session: str) -> None:
        """Refuse calls of ``session`` from now on."""
        if session in self._sessions:
            self._append(f"-{session}\n")
            del self._sessions[session]

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            if line.startswith("+"):
                session, _, context = line[1:].partition("\t")
                self._sessions[session] = context or None
            elif line.startswith("-"):
                self._sessions.pop(line[1:], None)
        # Compact: a journal of the live sessions only, replaced atomically (and private: an
        # older journal written with the default umask is made so here).
        live = "".join(_line(s, c) for s, c in sorted(self._sessions.items()))
        replace_durably(path, live.encode())

    def _append(self, line: str) -> None:
        if self.path is None:
            return
        try:
            make_directory(self.path.parent)
            append_durably(self.path, line.encode())
        except OSError as exc:
            raise RegistryError(f"cannot write the session registry {self.path}: {exc}") from exc


def _line(session: str, context: str | None) -> str:
    return f"+{session}\t{context}\n" if context else f"+{session}\n"


def _check(session: str) -> None:
    if not session or session != session.strip() or any(c in session for c in "\r\n\t"):
        raise RegistryError(
            "a session id must be non-empty, one line, without tabs or outer spaces"
        )
