"""``prefix_merge``: extend a segment while the next prompt starts with all of its tokens."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies.base import (
    Recency,
    SegmentBuilder,
    StrategyContext,
    StrategyResult,
    classify_break,
    touch,
    usable_calls,
)
from rollstream.schemas.packed import TokenIds

#: Segments a break is classified against besides the one holding the call's delta base.
BREAK_CANDIDATES = 8


def prefix_merge(calls: Sequence[ResolvedCall], context: StrategyContext) -> StrategyResult:
    """Strict merging that keeps the faithfulness invariant.

    A call extends a segment when the segment's tokens (prompts and completions so far) are a
    prefix of the call's prompt: the rest of the prompt is appended with mask 0, then the
    completion with mask 1. Segments are tried most recently used first, so a side call or a
    sub-agent interleaved with the main thread starts its own segment and the main thread
    resumes its segment afterwards. Otherwise the call starts a new root segment; the break
    is classified against the segment sharing the most leading tokens with the prompt among
    the most recently used ones and the one holding its delta base (see
    :func:`classify_break`: ``drift``, ``truncated``, ``retry``, ``edited_history``).
    """
    usable, tally = usable_calls(calls, context)
    builders: list[SegmentBuilder] = []
    recency: Recency = {}
    segment_of: dict[str, int] = {}  # call id -> the segment it was placed in
    for call in usable:
        prompt = call.prompt
        assert prompt is not None
        target = next((i for i in reversed(recency) if builders[i].is_prefix_of(prompt)), None)
        if target is None:
            if builders:
                tally.add_break(_break_reason(builders, recency, segment_of, call, prompt), call)
            target = len(builders)
            builders.append(SegmentBuilder())
        else:
            tally.merges += 1
        builders[target].place(call, prompt)
        segment_of[call.call_id] = target
        touch(recency, target)
    return StrategyResult([b.build() for b in builders], tally.stats())


def _break_reason(
    builders: list[SegmentBuilder],
    recency: Recency,
    segment_of: dict[str, int],
    call: ResolvedCall,
    prompt: TokenIds,
) -> str:
    # Against the segment the call came closest to extending; ties go to the most recent. The
    # candidates are the most recently used segments and the one holding the call's delta base
    # (the context the interceptor found sharing the most): comparing the prompt with every
    # segment would make a session that breaks at every call quadratic.
    base_id = call.record.prompt.base_call_id if call.record.prompt is not None else None
    candidates = list(islice(reversed(recency), BREAK_CANDIDATES))
    base = segment_of.get(base_id) if base_id is not None else None
    if base is not None and base not in candidates:
        candidates.append(base)
    best, shared = candidates[0], -1
    for i in candidates:
        n = builders[i].common_prefix_len(prompt)
        if n > shared:
            best, shared = i, n
    return classify_break(builders[best], prompt, shared)
