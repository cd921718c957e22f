"""Which session a call belongs to, and what each session's recent calls tokenized to.

The session id comes from the API key (``Authorization: Bearer``, ``x-api-key``,
``x-goog-api-key`` or Google's ``key`` query parameter), a ``x-rollstream-session`` header, or a
``/s/{session}/`` path prefix; the credential never goes upstream. What goes upstream instead
is a hash of it (``x-rollstream-session-hash``): a key for session affinity (a router keeping a
session on the replica that caches its prefix), which also lets the reference backend's
scripted policy tell sessions apart.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

from rollstream.schemas import PromptTokens, TokenIds, encode_prompt
from rollstream.schemas.requests import (
    RequestBase,
    RequestDigest,
    best_delta_by_digest,
    digest_request,
)

SESSION_HEADER = "x-rollstream-session"
AFFINITY_HEADER = "x-rollstream-session-hash"
_CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")


def session_of(headers: Mapping[str, str], path: str) -> tuple[str | None, str]:
    """The session id, and the path without a ``/s/{session}`` prefix or a ``key`` parameter.

    The returned path is what goes upstream and into the record: Google's ``key`` query
    parameter (a credential) is taken out of it whichever source names the session.
    """
    path, key = _without_key(path)
    if path.startswith("/s/"):
        rest = path[3:]
        session, _, tail = rest.partition("/")
        if session:
            return session, "/" + tail
    lowered = {k.lower(): v for k, v in headers.items()}
    if lowered.get(SESSION_HEADER):
        return lowered[SESSION_HEADER], path
    auth = lowered.get("authorization", "")
    if auth.lower().startswith("bearer ") and auth[7:].strip():
        return auth[7:].strip(), path
    for header in ("x-api-key", "x-goog-api-key"):
        if lowered.get(header):
            return lowered[header], path
    return key or None, path


def _without_key(path: str) -> tuple[str, str | None]:
    """The path without its ``key`` query parameters, and the first one's value."""
    bare, mark, query = path.partition("?")
    if not mark or ("key" not in query and "%" not in query):  # the usual path: no parsing
        return path, None
    kept: list[str] = []
    key: str | None = None
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if unquote_plus(name) == "key":
            key = unquote_plus(value) if key is None else key
        else:
            kept.append(pair)  # verbatim: re-encoding could change what the upstream reads
    return (bare + "?" + "&".join(kept) if kept else bare), key


def affinity_key(session: str) -> str:
    """A stable, non-reversible key of the session (16 hex digits of its SHA-256)."""
    return hashlib.sha256(session.encode()).hexdigest()[:16]


def credential_headers() -> tuple[str, ...]:
    """Headers that carry the harness's credential (the session id): never forwarded."""
    return (*_CREDENTIAL_HEADERS, SESSION_HEADER)


class SessionLedger:
    """Per-session sequence numbers and recent token sequences, bounded in sessions and calls.

    Sessions are evicted least recently used first, so memory stays O(open sessions x recent
    contexts) however long the interceptor runs.
    """

    def __init__(
        self, recent: int = 8, max_sessions: int = 10_000, recent_requests: int = 4
    ) -> None:
        self.recent = recent
        self.max_sessions = max_sessions
        self.recent_requests = recent_requests
        # Digests of recent requests, per (session, kind): what later ones are encoded against.
        self._requests: OrderedDict[tuple[str, str], deque[tuple[str, RequestDigest]]] = (
            OrderedDict()
        )
        self._sessions: OrderedDict[str, tuple[int, deque[tuple[str, TokenIds]]]] = OrderedDict()

    def next_seq(self, session: str) -> int:
        """The sequence number of the session's next call."""
        seq, contexts = self._entry(session)
        self._sessions[session] = (seq + 1, contexts)
        return seq

    def encode(
        self, session: str, call_id: str, prompt: TokenIds, completion: TokenIds
    ) -> PromptTokens:
        """Delta-encode ``prompt`` against the session's recent calls, then remember this call."""
        _, contexts = self._entry(session)
        encoded = encode_prompt(prompt, list(contexts))
        contexts.append((call_id, prompt + completion))
        return encoded

    def encode_request(
        self, session: str, call_id: str, kind: str, request: dict[str, Any]
    ) -> tuple[dict[str, Any], RequestBase | None]:
        """Delta-encode a request against the session's recent ones of the same ``kind``.

        ``kind`` is harness or upstream. Only the request's digests are remembered (see
        RequestDigest), bounded like the token contexts.
        """
        recent = self._requests.get((session, kind))
        if recent is None:
            recent = self._requests[(session, kind)] = deque(maxlen=self.recent_requests)
            while len(self._requests) > 2 * self.max_sessions:
                self._requests.popitem(last=False)
        else:
            self._requests.move_to_end((session, kind))
        digest = digest_request(request)
        encoded = best_delta_by_digest(request, digest, list(recent))
        recent.append((call_id, digest))
        return encoded

    def calls(self, session: str) -> int:
        """How many calls the session has had."""
        return self._sessions[session][0] if session in self._sessions else 0

    def _entry(self, session: str) -> tuple[int, deque[tuple[str, TokenIds]]]:
        if session in self._sessions:
            self._sessions.move_to_end(session)
        else:
            self._sessions[session] = (0, deque(maxlen=self.recent))
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return self._sessions[session]
