"""CallRecord: one LLM call, token ids and logprobs included."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import AwareDatetime, Field, model_validator

from rollstream.errors import SerializationError
from rollstream.schemas.base import AvroRecord, Model
from rollstream.schemas.blobs import decompress_json
from rollstream.schemas.packed import Logprobs, TokenIds
from rollstream.schemas.requests import RequestBase, resolve_request


class ApiKind(StrEnum):
    """The API a harness spoke to the interceptor."""

    CHAT_COMPLETIONS = "chat_completions"
    RESPONSES = "responses"
    ANTHROPIC_MESSAGES = "anthropic_messages"
    COMPLETIONS = "completions"
    UNKNOWN = "unknown"
    GEMINI = "gemini"  # Google generateContent; after UNKNOWN: Avro enums only grow at the end


class CallStatus(StrEnum):
    """How a call ended."""

    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


class PromptTokens(Model):
    """A delta-encoded prompt: ``shared_len`` tokens of the base call's context, then ``suffix``.

    The base call's context is its prompt followed by its completion. Without a base the
    suffix is the whole prompt.
    """

    base_call_id: str | None = None
    shared_len: int = Field(default=0, ge=0)
    suffix: TokenIds = TokenIds()

    @model_validator(mode="after")
    def _base_needed_for_sharing(self) -> PromptTokens:
        if self.base_call_id is None and self.shared_len:
            raise ValueError("shared_len > 0 needs a base_call_id")
        return self

    @property
    def is_full(self) -> bool:
        """Whether the prompt is written in full (no base call)."""
        return self.base_call_id is None


class CallTimings(Model):
    """When the call started, produced its first token and ended."""

    started_at: AwareDatetime
    first_token_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None


class CallError(Model):
    """Why a call failed."""

    type: str
    message: str
    http_status: int | None = None
    retriable: bool = False


class ContextMode(StrEnum):
    """How a call's prompt was built (see :class:`ContextInfo`)."""

    ORDINARY = "ordinary"
    EXACT = "exact"


class ContextInfo(Model):
    """Exact-context mode's verdict on one call; the record has none when the mode was off.

    ``exact``: the prompt went to ``/v1/completions`` as token ids, the previous prompt and its
    sampled completion kept; ``ordinary``: the server rendered the Chat request, and ``note``
    says why (first call of its thread, history edited, no tokenizer...).
    """

    mode: ContextMode = ContextMode.ORDINARY
    note: str = ""
    appended_end_of_turn: bool = False


#: How a harness sent a call to the interceptor.
Transport = Literal["http", "websocket"]


class Caller(Model):
    """Who is calling, as the harness says in its request headers (``interceptor/callers.py``).

    ``session`` is the harness's own session id (not rollstream's), ``agent`` the sub-agent or
    thread making the call when it is not the main one, ``parent`` the thread that spawned it,
    ``retry`` how often the harness's SDK has retried the request.
    """

    session: str | None = None
    agent: str | None = None
    parent: str | None = None
    retry: int | None = Field(default=None, ge=0)


class LeftOut(Model):
    """A part of a call its record does not hold, and why: the record is flagged, not lost.

    ``part`` names the CallRecord fields left empty: ``harness_request``, ``upstream_request``,
    ``response``, or ``tokens`` (the prompt, completion ids and logprobs). ``size`` and
    ``sha256`` describe the bytes the part would have taken (0 and "" when unknown).
    """

    part: str
    reason: str
    size: int = Field(default=0, ge=0)
    sha256: str = ""


class CallRecord(AvroRecord):
    """One LLM call of a harness session as the interceptor recorded it."""

    avro_name = "rollstream.CallRecord"

    call_id: str
    session_id: str
    seq: int = Field(ge=0)
    api: ApiKind
    model: str
    policy_version: int = 0
    stream: bool = False
    harness_request: bytes | None = None
    upstream_request: bytes | None = None
    response: bytes | None = None
    prompt: PromptTokens | None = None
    completion_token_ids: TokenIds | None = None
    completion_logprobs: Logprobs | None = None
    finish_reason: str | None = None
    timings: CallTimings
    status: CallStatus = CallStatus.OK
    error: CallError | None = None
    harness_request_base: RequestBase | None = None
    upstream_request_base: RequestBase | None = None
    context: ContextInfo | None = None
    left_out: list[LeftOut] = Field(default_factory=list)
    #: What the interceptor changed in the request so the served model takes it (an output
    #: limit above the served context lowered to it), one line each; empty when nothing.
    adjusted: list[str] = Field(default_factory=list)
    #: Who is calling, as the harness itself says; None when its headers name nobody.
    caller: Caller | None = None
    #: An earlier call of the session whose harness request this one repeats (the same
    #: conversation and fields, streamed or not: a retry, or the same request sent twice at
    #: once, which the timings tell apart); None when it repeats none.
    repeats: str | None = None
    #: How the harness sent the call: ``http``, or ``websocket`` (the Responses API over a
    #: WebSocket, which the interceptor ends and sends on as HTTP).
    transport: Transport = "http"

    @model_validator(mode="after")
    def _consistent(self) -> CallRecord:
        if (
            self.completion_logprobs is not None
            and self.completion_token_ids is not None
            and len(self.completion_logprobs) != len(self.completion_token_ids)
        ):
            raise ValueError(
                f"{len(self.completion_logprobs)} logprobs for "
                f"{len(self.completion_token_ids)} completion tokens"
            )
        if self.status is CallStatus.ERROR and self.error is None:
            raise ValueError("a call with status 'error' needs an error")
        return self

    @property
    def started_at(self) -> datetime:
        """When the call started."""
        return self.timings.started_at

    @property
    def has_tokens(self) -> bool:
        """Whether the server returned prompt and completion token ids."""
        return self.prompt is not None and self.completion_token_ids is not None

    def decoded_response(self) -> Any:
        """The normalized Chat Completions response as JSON, or None."""
        return None if self.response is None else decompress_json(self.response)


class SessionRequests:
    """The whole requests of a session's calls, resolving delta-encoded ones through their bases.

    Bases are other calls of the same session (the interceptor never refers across sessions);
    a base that is missing, or a chain that loops, is a SerializationError. A chain is walked
    back iteratively to a request resolved before (a bounded LRU of ``cache_size``) or to a
    whole one, then replayed forward, so a session of thousands of calls resolves in time
    linear in its chain and holds a few whole requests, not one per call.
    """

    def __init__(self, calls: Iterable[CallRecord], cache_size: int = 8) -> None:
        self._calls: dict[str, CallRecord] = {}
        for call in calls:
            self._calls.setdefault(call.call_id, call)  # at-least-once: the first copy wins
        self._cache_size = max(1, cache_size)
        self._memo: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def harness(self, call_id: str) -> Any:
        """The request as the harness sent it (None when not kept)."""
        return self._resolve("harness", call_id)

    def upstream(self, call_id: str) -> Any:
        """The Chat Completions request sent upstream (None when not kept)."""
        return self._resolve("upstream", call_id)

    def _resolve(self, which: Literal["harness", "upstream"], call_id: str) -> Any:
        key = (which, call_id)
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        # Back along the chain to a memoized request, a whole one, or one that is missing.
        chain: list[tuple[str, bytes, RequestBase | None]] = []
        seen: set[str] = set()
        start: Any = None
        owned = False  # whether ``start`` is ours to extend in place (not memoized)
        current: str | None = call_id
        while current is not None:
            memo_key = (which, current)
            if memo_key in self._memo:
                start = self._memo[memo_key]
                break
            if current in seen:
                raise SerializationError(f"request bases loop through call {current!r}")
            seen.add(current)
            call = self._calls.get(current)
            blob = None if call is None else _request_blob(call, which)
            if call is None or blob is None:
                break  # None: the delta naming it raises "unknown base"
            spec = call.harness_request_base if which == "harness" else call.upstream_request_base
            chain.append((current, blob, spec))
            current = spec.base_call_id if spec is not None else None
        if not chain:
            return start
        value = start
        for step_id, blob, spec in reversed(chain):
            rest = decompress_json(blob)
            if spec is None:
                value, owned = rest, True
                continue
            if not isinstance(rest, dict):
                raise SerializationError(f"call {step_id!r}: a request delta must be an object")
            value = _apply_delta(rest, spec, value, owned)
            owned = True
        self._memo[key] = value
        while len(self._memo) > self._cache_size:
            self._memo.popitem(last=False)
        return value


def _request_blob(call: CallRecord, which: str) -> bytes | None:
    return call.harness_request if which == "harness" else call.upstream_request


def _apply_delta(rest: dict[str, Any], spec: RequestBase, base: Any, owned: bool) -> Any:
    """:func:`resolve_request` one step along a chain, extending ``base``'s list if ``owned``.

    An intermediate request of a chain is held by nothing else, so its conversation list can be
    cut and extended rather than copied: copying would make a chain of n calls O(n^2).
    """
    base_request = base if isinstance(base, dict) else None
    head = base_request.get(spec.list_key) if base_request and spec.list_key else None
    if not owned or base_request is None or spec.list_key is None or not isinstance(head, list):
        return resolve_request(rest, spec, lambda _: base_request)
    out: dict[str, Any] = {}
    for key in spec.unchanged:
        if key not in base_request:
            raise SerializationError(f"request base {spec.base_call_id!r} has no field {key!r}")
        out[key] = base_request[key]
    out.update(rest)
    if len(head) < spec.shared_items:
        raise SerializationError(
            f"request shares {spec.shared_items} {spec.list_key} of base call "
            f"{spec.base_call_id!r}, which has fewer"
        )
    del head[spec.shared_items :]
    head.extend(rest.get(spec.list_key) or [])
    out[spec.list_key] = head
    return out
