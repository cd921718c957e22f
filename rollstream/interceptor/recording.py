"""Turning one intercepted call into a CallRecord."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rollstream.apis.chat import Asked, Capture
from rollstream.interceptor.sessions import LedgerUpdate, SessionLedger
from rollstream.schemas import (
    ApiKind,
    CallError,
    CallRecord,
    CallStatus,
    CallTimings,
    ContextInfo,
    Logprobs,
    TokenIds,
    compress_json,
)
from rollstream.schemas.calls import Caller, LeftOut, Transport

ANONYMOUS = "anonymous"
# zstd level 1, not the default 3: the producer compresses each batch again (zstd), and on a
# 44 kB agent request level 1 takes 30% less CPU for a blob 9% larger.
_BLOB_LEVEL = 1


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class CallState:
    """Everything known about one call while it is in flight."""

    api: ApiKind
    session: str
    harness_request: dict[str, Any]
    upstream_request: dict[str, Any] | None = None
    asked: Asked = field(default_factory=Asked)
    stream: bool = False  # what the harness asked for
    synthesized: bool = False  # streamed to the harness from a whole (non-streamed) answer
    #: The harness was handed the stream's last event (``[DONE]``, ``response.completed``,
    #: ``message_stop``...) for an answer that finished: it may hang up from then on.
    delivered: bool = False
    call_id: str = field(default_factory=lambda: f"call-{uuid.uuid4().hex}")
    started_at: datetime = field(default_factory=_now)
    first_token_at: datetime | None = None
    ended_at: datetime | None = None
    capture: Capture = field(default_factory=Capture)
    response: dict[str, Any] | None = None
    status: CallStatus = CallStatus.OK
    error: CallError | None = None
    recorded: bool = False
    context: ContextInfo | None = None  # set when exact context was asked for
    adjusted: list[str] = field(default_factory=list)  # request changes for the served model
    policy_version: int | None = None  # in force when the request went upstream; None: unsent
    caller: Caller | None = None  # who is calling, as the harness says (interceptor/callers.py)
    transport: Transport = "http"  # "websocket": sent by the bridge (interceptor/websocket.py)

    def fail(self, kind: str, message: str, http_status: int | None, retriable: bool) -> None:
        """Mark the call failed (the first failure wins)."""
        if self.error is None:
            self.status = CallStatus.ERROR
            self.error = CallError(
                type=kind, message=message[:2000], http_status=http_status, retriable=retriable
            )

    def cancel(self, message: str) -> None:
        """The harness went away before the answer ended."""
        self.status = CallStatus.CANCELLED
        self.error = CallError(type="cancelled", message=message[:2000])


def build_record(
    state: CallState, ledger: SessionLedger, model: str, policy_version: int
) -> tuple[CallRecord, LedgerUpdate]:
    """The CallRecord of a finished (or failed) call, token ids and requests delta-encoded.

    The ledger is only read: the returned update makes the call a base for later ones once
    committed, which the caller does after handing the record to the publisher.
    ``policy_version`` is the version now, stamped on a call never sent upstream.
    """
    update = ledger.begin(state.session, state.call_id)
    capture = state.capture
    prompt = completion = logprobs = None
    if capture.has_tokens:
        prompt_ids = (
            TokenIds(capture.packed_prompt_ids)
            if capture.packed_prompt_ids is not None
            else TokenIds.from_list(capture.prompt_token_ids or [])
        )
        completion = TokenIds.from_list(capture.completion_token_ids)
        prompt = ledger.encode_prompt(update, prompt_ids, completion)
        if capture.logprobs is not None:
            logprobs = Logprobs.from_list(capture.logprobs)
    response = chat_answer(state)
    # Both requests carry the whole conversation again on every call: kept as their difference
    # from a recent call of the session, so a session costs O(its tokens), not O(turns x context).
    harness, harness_base = ledger.encode_request(update, "harness", state.harness_request)
    upstream, upstream_base = (
        ledger.encode_request(update, "upstream", state.upstream_request)
        if state.upstream_request is not None
        else (None, None)
    )
    record = CallRecord(
        **_identity(state, update, model, policy_version),
        harness_request=compress_json(harness, _BLOB_LEVEL),
        harness_request_base=harness_base,
        upstream_request=compress_json(upstream, _BLOB_LEVEL) if upstream is not None else None,
        upstream_request_base=upstream_base,
        response=compress_json(response, _BLOB_LEVEL) if response is not None else None,
        prompt=prompt,
        completion_token_ids=completion,
        completion_logprobs=logprobs,
        finish_reason=capture.finish_reason,
        status=state.status,
        error=state.error,
        repeats=update.repeats,
    )
    return record, update


def reduced_record(
    state: CallState, ledger: SessionLedger, model: str, policy_version: int, reason: str
) -> tuple[CallRecord, LedgerUpdate]:
    """The record of a call whose whole record could not be built: what it was, and a flag.

    It keeps no request, answer or token ids (whatever failed is among them), names them in
    ``left_out`` with ``reason``, and its update makes it nobody's base.
    """
    update = ledger.begin(state.session, state.call_id)
    parts = ["harness_request"]
    parts += ["upstream_request"] if state.upstream_request is not None else []
    parts += ["response"] if chat_answer(state) is not None else []
    parts += ["tokens"] if state.capture.has_tokens else []
    error = state.error
    if state.status is CallStatus.ERROR and error is None:  # would fail validation again
        error = CallError(type="unknown", message="")
    record = CallRecord(
        **_identity(state, update, model, policy_version),
        # Only what cannot fail: the upstream's own fields may be what broke the record.
        finish_reason=finish if isinstance(finish := state.capture.finish_reason, str) else None,
        status=state.status,
        error=error,
        left_out=[LeftOut(part=part, reason=reason[:2000]) for part in parts],
    )
    return record, update


def _identity(
    state: CallState, update: LedgerUpdate, model: str, policy_version: int
) -> dict[str, Any]:
    """The fields every record of a call has, whole or reduced."""
    return {
        "call_id": state.call_id,
        "session_id": state.session,
        "seq": update.seq,
        "api": state.api,
        "model": model,
        # The version in force when the request went upstream, not now: a weight sync may have
        # happened while the call ran.
        "policy_version": state.policy_version
        if state.policy_version is not None
        else policy_version,
        "stream": state.stream,
        "timings": CallTimings(
            started_at=state.started_at,
            first_token_at=state.first_token_at,
            ended_at=state.ended_at or _now(),
        ),
        "context": state.context,
        "adjusted": list(state.adjusted),
        "caller": state.caller,
        "transport": state.transport,
    }


def chat_answer(state: CallState) -> dict[str, Any] | None:
    """The call's Chat Completions answer: the whole one, or the one assembled from its stream."""
    return state.response if state.response is not None else _response_from(state.capture)


def _response_from(capture: Capture) -> dict[str, Any] | None:
    """The normalized Chat Completions answer assembled from a stream."""
    if capture.finish_reason is None and not capture.content and not capture.tool_calls:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": capture.content or None}
    if capture.tool_calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for _, c in sorted(capture.tool_calls.items())
        ]
    return {
        "choices": [{"index": 0, "message": message, "finish_reason": capture.finish_reason}],
        "usage": {
            "prompt_tokens": capture.prompt_tokens,
            "completion_tokens": capture.completion_tokens,
        },
    }
