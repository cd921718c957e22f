"""The faithfulness checker: verifies that every segment of a trajectory keeps the invariant.

For every call placed in a segment, the segment's tokens before that call's completion are
exactly its prompt ids, and its completion follows with mask 1 and its logprobs. Every token
with mask 1 belongs to the completion of a call placed in that segment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies.base import MISSING_LOGPROB
from rollstream.schemas.trajectories import Segment

_ID = 4  # bytes per token id and per logprob

# Violation kinds.
UNKNOWN_CALL = "unknown_call"
REPEATED_CALL = "repeated_call"
CALL_WITHOUT_TOKENS = "call_without_tokens"
PROMPT_MISMATCH = "prompt_mismatch"
COMPLETION_MISMATCH = "completion_mismatch"
LOGPROB_MISMATCH = "logprob_mismatch"
SAMPLED_NOT_MASKED = "sampled_not_masked"
MASK_NOT_SAMPLED = "mask_not_sampled"


@dataclass(frozen=True)
class Violation:
    """One breach of the invariant: where (segment index, call, token position) and what.

    ``position`` is the first offending token in the segment (None when no position applies);
    one violation is reported per call and kind, or per run of wrongly masked tokens, with the
    count in ``detail``, so one bad call does not produce a line per token.
    """

    segment: int
    call_id: str | None
    position: int | None
    kind: str
    detail: str


def check_segments(
    segments: Sequence[Segment], calls: Mapping[str, ResolvedCall]
) -> list[Violation]:
    """Every violation of the faithfulness invariant in ``segments`` (empty: faithful).

    ``calls`` maps call id to the resolved call. Kinds: ``unknown_call`` (a call id not in
    ``calls``), ``repeated_call`` (placed again, here or in another segment: its tokens would
    be trained twice), ``call_without_tokens``, ``prompt_mismatch``, ``completion_mismatch``,
    ``logprob_mismatch`` (float32 comparison; a call without logprobs expects NaN, the
    strategies' mark of a missing logprob), ``sampled_not_masked`` (a completion token with
    mask 0) and ``mask_not_sampled`` (a mask-1 token outside every placed call's completion).
    """
    violations: list[Violation] = []
    placed: set[str] = set()
    for index, segment in enumerate(segments):
        violations.extend(_check_segment(index, segment, calls, placed))
    return violations


def _check_segment(
    index: int, segment: Segment, calls: Mapping[str, ResolvedCall], placed: set[str]
) -> list[Violation]:
    out: list[Violation] = []
    ids = segment.input_ids
    n = len(ids)
    mask = np.frombuffer(segment.loss_mask.data, dtype=np.uint8)
    covered = np.zeros(n, dtype=bool)
    for call_id in segment.call_ids:
        call = calls.get(call_id)
        if call is None:
            out.append(Violation(index, call_id, None, UNKNOWN_CALL, "no such call in the session"))
            continue
        if call_id in placed:
            out.append(Violation(index, call_id, None, REPEATED_CALL, "call placed more than once"))
        placed.add(call_id)
        if call.prompt is None or call.completion is None:
            reason = call.missing_reason or "no token ids"
            out.append(Violation(index, call_id, None, CALL_WITHOUT_TOKENS, reason))
            continue
        start, count = len(call.prompt), len(call.completion)
        end = start + count
        if not ids.startswith(call.prompt):
            shared = ids.common_prefix_len(call.prompt)
            detail = (
                f"segment has {n} tokens, prompt {start}; first difference at {shared}"
                if shared < n
                else f"segment ends at {n}, inside the {start}-token prompt"
            )
            out.append(Violation(index, call_id, shared, PROMPT_MISMATCH, detail))
        if end > n:
            out.append(
                Violation(
                    index,
                    call_id,
                    min(start, n),
                    COMPLETION_MISMATCH,
                    f"segment ends at {n}, completion needs tokens {start}..{end}",
                )
            )
            continue
        # The call claims these positions as sampled, right or wrong: a wrong token is one
        # completion_mismatch, not also a run of mask_not_sampled.
        covered[start:end] = True
        got = ids[start:end]
        if got != call.completion:
            first = start + got.common_prefix_len(call.completion)
            out.append(
                Violation(
                    index,
                    call_id,
                    first,
                    COMPLETION_MISMATCH,
                    f"completion tokens differ from {first} on",
                )
            )
        unmasked = np.flatnonzero(mask[start:end] != 1)
        if unmasked.size:
            out.append(
                Violation(
                    index,
                    call_id,
                    start + int(unmasked[0]),
                    SAMPLED_NOT_MASKED,
                    f"{unmasked.size} of {count} completion tokens have mask 0",
                )
            )
        wrong = _logprob_mismatches(segment, call, start, end)
        if wrong.size:
            out.append(
                Violation(
                    index,
                    call_id,
                    start + int(wrong[0]),
                    LOGPROB_MISMATCH,
                    f"{wrong.size} of {count} logprobs differ from the call's",
                )
            )
    out.extend(_unsampled_runs(index, mask, covered))
    return out


def _logprob_mismatches(
    segment: Segment, call: ResolvedCall, start: int, end: int
) -> npt.NDArray[np.intp]:
    """Offsets within the completion where the segment's logprobs are not the call's."""
    got = segment.logprobs.data[start * _ID : end * _ID]
    want = call.logprobs.data if call.logprobs is not None else MISSING_LOGPROB * (end - start)
    if got == want:  # the common case, without unpacking
        return np.empty(0, dtype=np.intp)
    a = np.frombuffer(got, dtype="<f4")
    b = np.frombuffer(want, dtype="<f4")
    # Float equality: -0.0 equals 0.0, and a NaN the server sent matches a NaN kept.
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    return np.flatnonzero(~same)


def _unsampled_runs(
    index: int, mask: npt.NDArray[np.uint8], covered: npt.NDArray[np.bool_]
) -> list[Violation]:
    """One ``mask_not_sampled`` violation per run of mask-1 tokens no placed call sampled."""
    bad = (mask != 0) & ~covered
    if not bad.any():
        return []
    flags = np.concatenate(([False], bad, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(flags))
    out = []
    for begin, stop in zip(edges[::2], edges[1::2], strict=True):
        out.append(
            Violation(
                index,
                None,
                int(begin),
                MASK_NOT_SAMPLED,
                f"{int(stop - begin)} token(s) with mask 1 sampled by no call placed here",
            )
        )
    return out
