"""Turning one intercepted call into a CallRecord."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rollstream.interceptor.sessions import SessionLedger
from rollstream.interceptor.translate.chat import Asked, Capture
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
) -> CallRecord:
    """The CallRecord of a finished (or failed) call; token ids delta-encoded per session."""
    capture = state.capture
    prompt = completion = logprobs = None
    if capture.has_tokens:
        prompt_ids = (
            TokenIds(capture.packed_prompt_ids)
            if capture.packed_prompt_ids is not None
            else TokenIds.from_list(capture.prompt_token_ids or [])
        )
        completion = TokenIds.from_list(capture.completion_token_ids)
        prompt = ledger.encode(state.session, state.call_id, prompt_ids, completion)
        if capture.logprobs is not None:
            logprobs = Logprobs.from_list(capture.logprobs)
    response = chat_answer(state)
    # Both requests carry the whole conversation again on every call: kept as their difference
    # from a recent call of the session, so a session costs O(its tokens), not O(turns x context).
    harness, harness_base = ledger.encode_request(
        state.session, state.call_id, "harness", state.harness_request
    )
    upstream, upstream_base = (
        ledger.encode_request(state.session, state.call_id, "upstream", state.upstream_request)
        if state.upstream_request is not None
        else (None, None)
    )
    return CallRecord(
        call_id=state.call_id,
        session_id=state.session,
        seq=ledger.next_seq(state.session),
        api=state.api,
        model=model,
        policy_version=policy_version,
        stream=state.stream,
        harness_request=compress_json(harness, _BLOB_LEVEL),
        harness_request_base=harness_base,
        upstream_request=compress_json(upstream, _BLOB_LEVEL) if upstream is not None else None,
        upstream_request_base=upstream_base,
        response=compress_json(response, _BLOB_LEVEL) if response is not None else None,
        prompt=prompt,
        completion_token_ids=completion,
        completion_logprobs=logprobs,
        finish_reason=capture.finish_reason,
        timings=CallTimings(
            started_at=state.started_at,
            first_token_at=state.first_token_at,
            ended_at=state.ended_at or _now(),
        ),
        status=state.status,
        error=state.error,
        context=state.context,
    )


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
