"""One trajectory as the viewer shows it: tokens with text, mask and logprob; calls; threads. Pure.

Each token id is decoded on its own with the served model's tokenizer (special tokens kept),
cached per id. The head of each segment's first prompt (the system prompt and the tool
schemas, thousands of tokens of the harness's instructions) is marked to be collapsed: up to
the special token that opens the message holding the task's instruction, or, when the
instruction cannot be found, all but the prompt's last tokens.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from rollstream.consumers.console.fleet import CallFacts, finite
from rollstream.consumers.export.rows import identity
from rollstream.consumers.score.evaluators.command import find_diff
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Scored, Segment, Trajectory

# Control characters would be invisible; newlines and tabs are kept.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Tokens of a first prompt left open when the instruction is not found in it.
OPEN_TAIL = 64
#: A first prompt shorter than this is not collapsed.
COLLAPSE_FROM = 128
#: Words of the instruction looked for in the prompt.
NEEDLE_WORDS = 8


class TokenTexts:
    """Display text of single tokens and whether each is special, cached per id."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, tuple[str, bool]] = {}

    def get(self, token_id: int) -> tuple[str, bool]:
        """``(text, special)``; an id outside the vocabulary reads ``⟨id?⟩``."""
        found = self._cache.get(token_id)
        if found is None:
            found = self._cache[token_id] = self._decode(token_id)
        return found

    def _decode(self, token_id: int) -> tuple[str, bool]:
        if token_id >= self._tokenizer.vocab_size:
            return f"\u27e8{token_id}?\u27e9", False
        text = self._tokenizer.token_text(token_id)
        # Special tokens are the ones skip_special_tokens drops (all_special_ids misses some).
        special = bool(text) and not self._tokenizer.decode([token_id], skip_special_tokens=True)
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text), special


def completion_starts(mask: np.ndarray[tuple[int], np.dtype[np.uint8]]) -> list[int]:
    """Positions where a run of loss mask 1 begins, in order."""
    ones = mask.astype(bool)
    starts = ones.copy()
    starts[1:] &= ~ones[:-1]
    return [int(i) for i in np.flatnonzero(starts)]


def collapsed_range(
    texts: Sequence[str], special: Sequence[bool], first_sampled: int, instruction: str | None
) -> tuple[int, int] | None:
    """The ``[0, end)`` head of a segment's first prompt to collapse, or None."""
    if first_sampled < COLLAPSE_FROM:
        return None
    words = (instruction or "").split()[:NEEDLE_WORDS]
    if words:
        text = ""
        starts: list[int] = []  # character offset of each token in the joined prompt
        for piece in texts[:first_sampled]:
            starts.append(len(text))
            text += piece
        # Any whitespace between the words: a template may wrap or re-indent the instruction.
        found = re.search(r"\s+".join(map(re.escape, words)), text)
        if found is not None:
            token = max(i for i, s in enumerate(starts) if s <= found.start())
            opener = max((i for i in range(token + 1) if special[i]), default=0)
            return (0, opener) if opener > 0 else None
    end = first_sampled - OPEN_TAIL
    return (0, end) if end > 0 else None


def segment_view(
    segment: Segment, index: int, texts: TokenTexts, instruction: str | None, cap: int
) -> dict[str, Any]:
    """A segment's tokens (``cap`` of them at most), call starts and the range to collapse.

    A segment over the cap gives up the head of its collapsed prefix first (``first`` is the
    index of the first token sent): the harness's instructions, which a real harness makes
    longer than the cap on its own, so that cutting the tail would send no sampled token.
    """
    ids = np.frombuffer(segment.input_ids.data, "<u4")
    mask = np.frombuffer(segment.loss_mask.data, np.uint8)
    logprobs = np.frombuffer(segment.logprobs.data, "<f4")
    starts = completion_starts(mask)
    first_sampled = starts[0] if starts else len(ids)
    prompt = [texts.get(int(i)) for i in ids[:first_sampled]]
    collapsed = collapsed_range(
        [t for t, _ in prompt], [s for _, s in prompt], first_sampled, instruction
    )
    first = 0
    if collapsed is not None and len(ids) > cap:
        first = min(collapsed[1], len(ids) - cap)
        collapsed = (0, collapsed[1] - first) if collapsed[1] > first else None
    end = min(len(ids), first + cap)
    decoded = prompt[first:end] + [texts.get(int(i)) for i in ids[max(first, first_sampled) : end]]
    calls = segment.call_ids
    return {
        "index": index,
        "parent": segment.parent,
        "call_ids": list(calls),
        "total_tokens": len(ids),
        "trainable_tokens": int(mask.sum()),
        "first": first,
        "truncated": first > 0 or end < len(ids),
        "collapsed": collapsed,
        "tokens": {
            "id": [int(i) for i in ids[first:end]],
            "text": [t for t, _ in decoded],
            "mask": [int(m) for m in mask[first:end]],
            # A context token's logprob is not the policy's: sent as null, not as 0 (and so
            # is one that is not a finite number, which JSON cannot carry).
            "logprob": [
                finite(round(float(lp), 5)) if m else None
                for lp, m in zip(logprobs[first:end], mask[first:end], strict=True)
            ],
            "special": [s for _, s in decoded],
        },
        "call_starts": [
            {"at": at - first, "call_id": calls[k] if k < len(calls) else f"call #{k + 1}"}
            for k, at in enumerate(starts)
            if first <= at < end
        ],
    }


def trajectory_view(
    record: Scored | Trajectory,
    texts: TokenTexts,
    calls: Sequence[CallFacts],
    *,
    topic: str,
    other_topics: Sequence[str] = (),
    cap: int = 20_000,
) -> dict[str, Any]:
    """Everything the viewer shows of one trajectory."""
    trajectory = record.trajectory if isinstance(record, Scored) else record
    scored = record if isinstance(record, Scored) else None
    instruction = trajectory.task.instruction if trajectory.task is not None else None
    diff = find_diff(trajectory, {})
    return {
        **identity(trajectory),
        "topic": topic,
        "reward": finite(scored.reward) if scored else None,
        "evaluator": scored.evaluator if scored else None,
        "details": dict(scored.details) if scored else {},
        "error": scored.error if scored else None,
        "instruction": instruction,
        "segments": [
            segment_view(s, i, texts, instruction, cap) for i, s in enumerate(trajectory.segments)
        ],
        "calls": [asdict(c) for c in sorted(calls, key=lambda c: (c.started_at, c.seq))],
        "threads": [t.model_dump() for t in trajectory.threads],
        "notes": list(trajectory.stats.notes),
        "diff": diff.content.decode("utf-8", "replace") if diff else None,
        "final_text": trajectory.final_text,
        "other_topics": [t for t in other_topics if t != topic],
    }
