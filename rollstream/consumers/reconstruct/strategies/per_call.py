"""``per_call``: one segment per call, its prompt as context and its completion trained."""

from __future__ import annotations

from collections.abc import Sequence

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies.base import (
    SegmentBuilder,
    StrategyContext,
    StrategyResult,
    usable_calls,
)


def per_call(calls: Sequence[ResolvedCall], context: StrategyContext) -> StrategyResult:
    """One segment per usable call: prompt with mask 0, completion with mask 1 and its logprobs.

    Keeps the invariant trivially; nothing is merged, so ``merges`` and ``breaks`` stay 0.
    Costs O(calls x context) tokens: the baseline the merging strategies are measured against.
    """
    usable, tally = usable_calls(calls, context)
    segments = []
    for call in usable:
        builder = SegmentBuilder()
        builder.place(call)
        segments.append(builder.build())
    return StrategyResult(segments, tally.stats())
