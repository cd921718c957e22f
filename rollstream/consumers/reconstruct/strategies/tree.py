"""``tree``: each call hangs under the segment that shares the longest token prefix with it."""

from __future__ import annotations

from collections.abc import Sequence

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies.base import (
    BRANCH,
    EDITED_HISTORY,
    Recency,
    SegmentBuilder,
    StrategyContext,
    StrategyResult,
    classify_break,
    touch,
    usable_calls,
)


def tree(calls: Sequence[ResolvedCall], context: StrategyContext) -> StrategyResult:
    """Segments as a tree of complete training sequences; keeps the invariant.

    Each call is compared with every segment and attaches to the one sharing the longest
    common prefix with its prompt (ties: a segment that is wholly a prefix, then the most
    recently used). When that segment's tokens are all a prefix of the prompt, the call extends
    it as in ``prefix_merge``. When they are only in part, the call starts a child segment
    (``parent`` = that segment's index) holding its full prompt with mask 0 and its completion
    with mask 1: every segment is a whole sequence a trainer can use alone, and since shared
    tokens are context (mask 0) in the child, no sampled token is trained twice. A prompt
    sharing nothing with any segment starts a new root.

    Break reasons: ``drift``, ``truncated`` and ``retry`` as in ``prefix_merge``; ``branch``
    for a child forking earlier in its parent (side call, sub-agent, compaction, parallel
    branch); ``edited_history`` for a new root.
    """
    usable, tally = usable_calls(calls, context)
    builders: list[SegmentBuilder] = []
    recency: Recency = {}  # segment indexes, least recently used first
    for call in usable:
        prompt = call.prompt
        assert prompt is not None
        best: int | None = None
        best_key = (-1, False)
        for i in reversed(recency):
            shared = builders[i].common_prefix_len(prompt)
            key = (shared, shared == len(builders[i]))
            if key > best_key:
                best, best_key = i, key
        if best is not None and best_key[1]:
            builders[best].place(call)
            tally.merges += 1
            touch(recency, best)
            continue
        parent: int | None = None
        if best is not None:
            shared = best_key[0]
            reason = classify_break(builders[best], prompt, shared)
            if shared > 0:
                parent = best
                reason = BRANCH if reason == EDITED_HISTORY else reason
            else:
                reason = EDITED_HISTORY
            tally.add_break(reason, call)
        builder = SegmentBuilder(parent=parent)
        builder.place(call)
        builders.append(builder)
        touch(recency, len(builders) - 1)
    return StrategyResult([b.build() for b in builders], tally.stats())
