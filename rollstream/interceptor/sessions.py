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
import hmac
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def named_session(headers: Mapping[str, str], path: str) -> bool:
    """Whether the call names its session (``/s/{session}/``, ``x-rollstream-session``).

    A named session is an id its launcher chose; any other comes from a credential, which may
    be a real secret sent to the wrong place (``keyed_session``).
    """
    if path.startswith("/s/") and path[3:].partition("/")[0]:
        return True
    return any(k.lower() == SESSION_HEADER and v for k, v in headers.items())


#: The prefix of a session named after an unregistered key (``keyed_session``).
KEYED_PREFIX = "key-"


def keyed_session(secret: bytes, credential: str) -> str:
    """The session of an API key nobody registered: ``key-`` and 24 hex digits of its HMAC.

    Keyed (``secret`` is the deployment's), so the id says nothing about the key, not even
    to a dictionary of likely keys; stable, so a key's calls still make one session.
    """
    digest = hmac.new(secret, credential.encode(), hashlib.sha256).hexdigest()
    return KEYED_PREFIX + digest[:24]


def affinity_key(session: str) -> str:
    """A stable, non-reversible key of the session (16 hex digits of its SHA-256)."""
    return hashlib.sha256(session.encode()).hexdigest()[:16]


def credential_headers() -> tuple[str, ...]:
    """Headers that carry the harness's credential (the session id): never forwarded."""
    return (*_CREDENTIAL_HEADERS, SESSION_HEADER)


#: Request fields that say how the answer travels or who is asking, not what is asked: a
#: harness's retry may change them (Claude Code asks again without ``stream``, Codex with new
#: ``client_metadata``).
UNASKED_FIELDS = frozenset({"stream", "stream_options", "metadata", "client_metadata", "user"})


def same_request(a: RequestDigest, b: RequestDigest) -> bool:
    """Whether two requests ask the same: equal conversations, and fields but UNASKED_FIELDS."""
    if a.list_key != b.list_key or a.items != b.items:
        return False
    asked = {k: v for k, v in a.fields.items() if k not in UNASKED_FIELDS}
    return asked == {k: v for k, v in b.fields.items() if k not in UNASKED_FIELDS}


@dataclass
class LedgerUpdate:
    """What one call adds to its session's ledger: applied by ``SessionLedger.commit`` only.

    A call becomes a delta base (its token context, its requests' digests) only once its
    record was built and handed to the publisher: a record that never reaches Kafka must not
    be named as the base of later calls, which would then lose their prompts.
    """

    session: str
    call_id: str
    seq: int
    context: TokenIds | None = None  # prompt + completion, when the record keeps its tokens
    requests: dict[str, RequestDigest] = field(default_factory=dict)  # by kind, kept ones
    #: A recent call whose harness request asks what this one's does (CallRecord.repeats).
    repeats: str | None = None

    def leave_out(self, *parts: str) -> None:
        """The record does not keep these parts (``tokens``, ``harness``, ``upstream``)."""
        for part in parts:
            if part == "tokens":
                self.context = None
            else:
                self.requests.pop(part, None)


class SessionLedger:
    """Per-session sequence numbers and recent token sequences, bounded in sessions and calls.

    Encoding a call reads the ledger and returns a ``LedgerUpdate``; nothing changes until that
    update is committed (``begin``, ``encode_prompt``, ``encode_request`` then ``commit``, all
    in one synchronous step of the event loop, so no other call of the session interleaves).
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

    def begin(self, session: str, call_id: str) -> LedgerUpdate:
        """An empty update for the session's next call (its sequence number reserved on commit)."""
        return LedgerUpdate(session, call_id, self.calls(session))

    def encode_prompt(
        self, update: LedgerUpdate, prompt: TokenIds, completion: TokenIds
    ) -> PromptTokens:
        """Delta-encode ``prompt`` against the session's recent calls (remembered on commit)."""
        entry = self._sessions.get(update.session)
        encoded = encode_prompt(prompt, list(entry[1]) if entry is not None else [])
        update.context = prompt + completion
        return encoded

    def encode_request(
        self, update: LedgerUpdate, kind: str, request: dict[str, Any]
    ) -> tuple[dict[str, Any], RequestBase | None]:
        """Delta-encode a request against the session's recent ones of the same ``kind``.

        ``kind`` is harness or upstream. Only the request's digests are remembered (see
        RequestDigest), bounded like the token contexts, and only on commit.
        """
        recent = self._requests.get((update.session, kind))
        digest = digest_request(request)
        encoded = best_delta_by_digest(request, digest, list(recent) if recent else [])
        update.requests[kind] = digest
        if kind == "harness":  # the harness sent this request before: the latest such call
            update.repeats = next(
                (c for c, d in reversed(recent or ()) if same_request(d, digest)), None
            )
        return encoded

    def commit(self, update: LedgerUpdate) -> None:
        """The call's record went to the publisher: count it, and keep what it holds as bases."""
        seq, contexts = self._entry(update.session)
        self._sessions[update.session] = (max(seq, update.seq + 1), contexts)
        if update.context is not None:
            contexts.append((update.call_id, update.context))
        for kind, digest in update.requests.items():
            recent = self._requests.get((update.session, kind))
            if recent is None:
                recent = self._requests[(update.session, kind)] = deque(maxlen=self.recent_requests)
                while len(self._requests) > 2 * self.max_sessions:
                    self._requests.popitem(last=False)
            else:
                self._requests.move_to_end((update.session, kind))
            recent.append((update.call_id, digest))

    def calls(self, session: str) -> int:
        """How many calls the session has had (records handed to the publisher)."""
        return self._sessions[session][0] if session in self._sessions else 0

    def _entry(self, session: str) -> tuple[int, deque[tuple[str, TokenIds]]]:
        if session in self._sessions:
            self._sessions.move_to_end(session)
        else:
            self._sessions[session] = (0, deque(maxlen=self.recent))
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return self._sessions[session]
