"""``prefix_merge``: extend a segment while the next prompt starts with all of its tokens."""

from __future__ import annotations

from collections.abc import Sequence

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies.base import (
    SegmentBuilder,
    StrategyContext,
    StrategyResult,
    classify_break,
    touch,
    usable_calls,
)


def prefix_merge(calls: Sequence[ResolvedCall], context: StrategyContext) -> StrategyResult:
    """Strict merging that keeps the faithfulness invariant.

    A call extends a segment when the segment's tokens (prompts and completions so far) are a
    prefix of the call's prompt: the rest of the prompt is appended with mask 0, then the
    completion with mask 1. Segments are tried most recently used first, so a side call or a
    sub-agent interleaved with the main thread starts its own segment and the main thread
    resumes its segment afterwards. Otherwise the call starts a new root segment; the break
    is classified against the segment sharing the most leading tokens with the prompt (see
    :func:`classify_break`: ``drift``, ``truncated``, ``retry``, ``edited_history``).
    """
    usable, tally = usable_calls(calls, context)
    builders: list[SegmentBuilder] = []
    recency: list[int] = []  # segment indexes, least recently used first
    for call in usable:
        assert call.prompt is not None
        target = next((i for i in reversed(recency) if builders[i].is_prefix_of(call.prompt)), None)
        if target is not None:
            builders[target].place(call)
            tally.merges += 1
            touch(recency, target)
            continue
        if builders:
            tally.add_break(_break_reason(builders, recency, call))
        builder = SegmentBuilder()
        builder.place(call)
        builders.append(builder)
        touch(recency, len(builders) - 1)
    return StrategyResult([b.build() for b in builders], tally.stats())


def _break_reason(builders: list[SegmentBuilder], recency: list[int], call: ResolvedCall) -> str:
    # Against the segment the call came closest to extending; ties go to the most recent.
    assert call.prompt is not None
    best, shared = recency[-1], -1
    for i in reversed(recency):
        n = builders[i].common_prefix_len(call.prompt)
        if n > shared:
            best, shared = i, n
    return classify_break(builders[best], call.prompt, shared)
