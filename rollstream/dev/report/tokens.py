"""A segment's tokens as HTML: one span per token, coloured by loss mask, call starts marked.

Each id is decoded on its own with the served model's tokenizer (special tokens kept) and
HTML-escaped once per id. Completions are the runs of loss mask 1; the k-th run is labelled
with the segment's k-th call id.
"""

from __future__ import annotations

import html
import re

import numpy as np

from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Segment

# Control characters would be invisible (or invalid in HTML); newlines and tabs are kept.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    # A newline token is shown as a glyph before the line break, so it has a visible background.
    return text.replace("\n", "\u21b5\n")


class TokenTexts:
    """The escaped display text of single tokens and whether each is special, cached per id."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, tuple[str, str]] = {}

    def get(self, token_id: int) -> tuple[str, str]:
        """``(escaped text, extra class)``; the class is ``sp`` (special), ``unk`` or empty."""
        found = self._cache.get(token_id)
        if found is None:
            found = self._cache[token_id] = self._decode(token_id)
        return found

    def _decode(self, token_id: int) -> tuple[str, str]:
        if token_id >= self._tokenizer.vocab_size:
            return html.escape(f"\u27e8{token_id}?\u27e9"), " unk"
        text = self._tokenizer.token_text(token_id)
        # Special tokens are the ones skip_special_tokens drops (all_special_ids misses some).
        special = bool(text) and not self._tokenizer.decode([token_id], skip_special_tokens=True)
        return html.escape(_visible(text)), " sp" if special else ""


def mask_of(segment: Segment) -> np.ndarray[tuple[int], np.dtype[np.uint8]]:
    """The segment's loss mask as a numpy view of its packed bytes."""
    return np.frombuffer(segment.loss_mask.data, np.uint8)


def completion_starts(loss_mask: np.ndarray[tuple[int], np.dtype[np.uint8]]) -> list[int]:
    """Positions where a run of loss mask 1 begins, in order."""
    ones = loss_mask.astype(bool)
    starts = ones.copy()
    starts[1:] &= ~ones[:-1]
    return [int(i) for i in np.flatnonzero(starts)]


def shown_ranges(n: int, cap: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` ranges of ``n`` tokens shown under a cap: all, or head and tail."""
    if n <= cap:
        return [(0, n)]
    head = cap // 2
    return [(0, head), (n - (cap - head), n)]


def call_label(call_ids: list[str], k: int) -> str:
    """The call whose completion is the k-th run of mask 1."""
    return call_ids[k] if k < len(call_ids) else f"call #{k + 1} (unnamed)"


def segment_tokens_html(segment: Segment, texts: TokenTexts, cap: int) -> str:
    """The inside of a segment's token box."""
    ids = np.frombuffer(segment.input_ids.data, "<u4")
    mask = mask_of(segment)
    logprobs = np.frombuffer(segment.logprobs.data, "<f4")
    starts = {pos: k for k, pos in enumerate(completion_starts(mask))}
    parts: list[str] = []
    previous_end = 0
    for start, end in shown_ranges(len(ids), cap):
        if start > previous_end:
            omitted = mask[previous_end:start]
            parts.append(
                f'<span class="omitted">\u2026 {start - previous_end:,} tokens omitted here '
                f"(positions {previous_end:,}\u2013{start - 1:,}, {int(omitted.sum()):,} "
                "trainable) \u2026</span>"
            )
        for i in range(start, end):
            k = starts.get(i)
            if k is not None:
                label = html.escape(call_label(segment.call_ids, k))
                parts.append(
                    f'<span class="call" title="completion of {label} starts">{label}</span>'
                )
            text, extra = texts.get(int(ids[i]))
            m = int(mask[i])
            parts.append(
                f'<span class="t m{m}{extra}" title="id {ids[i]} \u00b7 logprob '
                f'{float(logprobs[i]):.4f}">{text}</span>'
            )
        previous_end = end
    return "".join(parts)
