"""A trajectory's segments on the wire: each whole, or as a delta of an earlier segment.

Every strategy starts a segment with its first call's whole prompt as context, so after a break
(drift, truncation, a branch) the new segment repeats the context its predecessor already holds:
a session of many calls whose contexts drift costs calls x context bytes. Written as a delta, a
segment names an earlier one (``base``) and how many of its leading ids it starts with
(``shared``), and carries only the rest, as CallRecords carry prompts. The shared ids must be
context in the new segment (mask 0, logprob 0), so the delta is lossless; records are read back
whole, and readers see the segments they always did.
"""

from __future__ import annotations

from typing import Any

from rollstream.errors import SerializationError
from rollstream.schemas.packed import Logprobs, TokenIds, common_prefix

#: Sharing fewer ids than this is not worth a reference to another segment.
MIN_SHARED = 16
#: Earlier segments tried as a base besides the parent: a break's context is the previous one's.
CANDIDATES = 8

_ID = TokenIds.itemsize
_LOGPROB = Logprobs.itemsize

Wire = dict[str, Any]


def _leading_zeros(data: bytes) -> int:
    return len(data) - len(data.lstrip(b"\0"))


def _context_run(segment: Wire) -> int:
    """How many leading tokens are context (mask 0, logprob bytes 0): what a delta may share."""
    run = _leading_zeros(segment["loss_mask"])
    return min(run, _leading_zeros(segment["logprobs"][: run * _LOGPROB]) // _LOGPROB)


def to_wire(segments: list[Wire]) -> list[Wire]:
    """``segments`` (model dumps: packed bytes) with each written as a delta where one pays."""
    out: list[Wire] = []
    for index, segment in enumerate(segments):
        run = _context_run(segment)
        best, shared = None, 0
        if run >= MIN_SHARED:
            parent = segment.get("parent")
            tried = [parent] if parent is not None and 0 <= parent < index else []
            tried += [j for j in range(index - 1, max(-1, index - 1 - CANDIDATES), -1)]
            for j in dict.fromkeys(tried):
                n = min(common_prefix(segments[j]["input_ids"], segment["input_ids"]), run)
                if n > shared:
                    best, shared = j, n
        if best is None or shared < MIN_SHARED:
            out.append({**segment, "base": None, "shared": 0})
            continue
        out.append(
            {
                **segment,
                "input_ids": segment["input_ids"][shared * _ID :],
                "loss_mask": segment["loss_mask"][shared:],
                "logprobs": segment["logprobs"][shared * _LOGPROB :],
                "base": best,
                "shared": shared,
            }
        )
    return out


def from_wire(wire: list[Wire]) -> list[Wire]:
    """The whole segments of ``wire`` (as :func:`to_wire` wrote them, or whole ones).

    Raises SerializationError (not retriable) for a delta naming no earlier segment or sharing
    more ids than its base has.
    """
    out: list[Wire] = []
    for index, segment in enumerate(wire):
        base, shared = segment.pop("base", None), int(segment.pop("shared", 0) or 0)
        if base is None:
            out.append(segment)
            continue
        if not 0 <= base < index:
            raise SerializationError(f"segment {index} is a delta of segment {base}, not earlier")
        ids: bytes = out[base]["input_ids"]
        if shared < 0 or len(ids) < shared * _ID:
            raise SerializationError(
                f"segment {index} shares {shared} ids of segment {base}, "
                f"which has {len(ids) // _ID}"
            )
        segment["input_ids"] = ids[: shared * _ID] + segment["input_ids"]
        segment["loss_mask"] = bytes(shared) + segment["loss_mask"]
        segment["logprobs"] = bytes(shared * _LOGPROB) + segment["logprobs"]
        out.append(segment)
    return out
