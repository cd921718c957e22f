"""A session's CallRecords in order, deduplicated, with their delta-encoded prompts resolved."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rollstream.errors import SerializationError
from rollstream.schemas.calls import CallRecord, CallStatus, SessionRequests
from rollstream.schemas.packed import Logprobs, TokenIds
from rollstream.schemas.prompts import SessionPrompts

# Why a call has no usable token ids (ResolvedCall.missing_reason).
NO_TOKEN_IDS = "no_token_ids"
UNRESOLVABLE_PROMPT = "unresolvable_prompt"
FAILED = "failed"
CANCELLED = "cancelled"


@dataclass(frozen=True)
class ResolvedCall:
    """One call of a session with its full prompt token ids, ready for a strategy.

    ``prompt`` and ``completion`` are None when the call has no usable tokens; then
    ``missing_reason`` says why (``no_token_ids``, ``failed``, ``cancelled`` or
    ``unresolvable_prompt``). ``record`` is kept for strategies that re-render the conversation.
    ``superseded_by`` names the call that retried this one (see :func:`retried_calls`): its
    answer, if any, is not where the rollout went on from.

    The full prompt is built on demand from the session's delta chain (``prompts``), not kept:
    a long session's prompts together would be O(calls x context). Reading it again soon is
    cheap (recent prompts are cached); hold on to it only as long as it is needed.
    """

    call_id: str
    seq: int
    status: CallStatus
    finish_reason: str | None
    completion: TokenIds | None
    logprobs: Logprobs | None
    policy_version: int
    error_type: str | None
    missing_reason: str | None
    record: CallRecord = field(repr=False)  # the blobs would swamp a repr
    #: The session's whole requests (delta-encoded ones resolved on demand).
    requests: SessionRequests | None = field(default=None, repr=False, compare=False)
    #: The session's prompts; None when this call has no usable prompt.
    prompts: SessionPrompts | None = field(default=None, repr=False, compare=False)
    superseded_by: str | None = None

    @property
    def prompt(self) -> TokenIds | None:
        """The full prompt token ids (None without usable tokens)."""
        return None if self.prompts is None else self.prompts.prompt(self.call_id)

    @property
    def prompt_len(self) -> int | None:
        """The full prompt's length in tokens, without building it."""
        return None if self.prompts is None else self.prompts.prompt_len(self.call_id)

    @property
    def has_tokens(self) -> bool:
        """Whether both the full prompt and the completion token ids are known."""
        return self.prompts is not None and self.completion is not None

    def context(self) -> TokenIds | None:
        """Prompt followed by completion (what later calls' prompts are delta-encoded against)."""
        return None if self.prompts is None else self.prompts.context(self.call_id)


def resolve_calls(records: Iterable[CallRecord]) -> list[ResolvedCall]:
    """The session's calls ordered by ``(seq, call_id)``, each call id once, prompts resolved.

    The interceptor's spool delivers at least once, so a call id may arrive twice: the first
    in order is kept. A prompt's base must come earlier in that order (the interceptor only
    encodes against calls it has already recorded); an unknown or too short base leaves the
    call without a prompt (``unresolvable_prompt``), and so every call based on it. Resolution
    is one pass over the calls, checking every chain without building any prompt.
    """
    ordered = sorted(records, key=lambda r: (r.seq, r.call_id))
    retried = retried_calls(ordered)
    requests = SessionRequests(ordered)
    prompts = SessionPrompts()
    seen: set[str] = set()
    out: list[ResolvedCall] = []
    for record in ordered:
        if record.call_id in seen:
            continue
        seen.add(record.call_id)
        resolved = False
        missing: str | None = None
        if record.prompt is not None and record.completion_token_ids is not None:
            try:
                prompts.add(record.call_id, record.prompt, record.completion_token_ids)
                resolved = True
            except SerializationError:
                missing = UNRESOLVABLE_PROMPT
        else:
            missing = _missing_reason(record.status)
        completion = record.completion_token_ids if resolved else None
        out.append(
            ResolvedCall(
                call_id=record.call_id,
                seq=record.seq,
                status=record.status,
                finish_reason=record.finish_reason,
                completion=completion,
                logprobs=record.completion_logprobs if completion is not None else None,
                policy_version=record.policy_version,
                error_type=record.error.type if record.error is not None else None,
                missing_reason=missing,
                record=record,
                requests=requests,
                prompts=prompts if resolved else None,
                superseded_by=retried.get(record.call_id),
            )
        )
    return out


def retried_calls(records: Iterable[CallRecord]) -> dict[str, str]:
    """The calls the harness sent again once they had ended: attempt id -> the retry's id.

    The interceptor names the earlier call whose request a call repeats (``CallRecord.repeats``:
    the same conversation and fields, streamed or not). Sent after that one ended, the call is
    a retry (an SDK's, or the harness's own after an error, a timeout or a disconnect), and
    the rollout goes on from the retry's answer. The same request sent while the other still
    ran is a second sample: both stand. A retry of a retry supersedes it in turn.
    """
    by_id: dict[str, CallRecord] = {}
    for record in records:
        by_id.setdefault(record.call_id, record)
    out: dict[str, str] = {}
    for record in by_id.values():
        earlier = by_id.get(record.repeats) if record.repeats is not None else None
        if earlier is None or earlier.call_id in out:
            continue
        ended = earlier.timings.ended_at  # unknown: it may have run beside, both stand
        if ended is not None and ended <= record.timings.started_at:
            out[earlier.call_id] = record.call_id
    return out


def _missing_reason(status: CallStatus) -> str:
    if status is CallStatus.CANCELLED:
        return CANCELLED
    if status is not CallStatus.OK:
        return FAILED
    return NO_TOKEN_IDS
