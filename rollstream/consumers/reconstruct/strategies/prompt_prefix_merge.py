"""``prompt_prefix_merge`` (Polar's): chain calls whose prompt extends the previous prompt."""

from __future__ import annotations

from collections.abc import Sequence

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies.base import (
    EDITED_HISTORY,
    RETRY,
    TRUNCATED,
    UNSPLICEABLE,
    Recency,
    SegmentBuilder,
    StrategyContext,
    StrategyResult,
    touch,
    usable_calls,
)

_ID_SIZE = 4
# The finish reasons of a completion that ended by sampling the end-of-turn token.
_ENDED_BY_EOS = frozenset({"stop", "tool_calls"})

NOTE = (
    "prompt_prefix_merge relaxes the faithfulness invariant: each sampled completion is kept "
    "where later prompts re-rendered it, so the context after it is not the token ids the "
    "server saw for later calls"
)


def prompt_prefix_merge(calls: Sequence[ResolvedCall], context: StrategyContext) -> StrategyResult:
    """Polar's merge: sampled tokens kept, tool results and template glue sliced from prompts.

    A call whose prompt starts with all of a chain's tokens is appended to it as in
    ``prefix_merge`` (chains tried most recently used first). Otherwise it continues the chain
    whose last call's prompt is the longest prefix of its prompt (the closest predecessor, so
    interleaved side calls do not break the main thread): the chain keeps that call's sampled
    completion (mask 1) instead of the assistant turn as the new prompt re-rendered it, then
    gets the new prompt's remainder from just after that re-rendered turn (mask 0), then the
    call's completion (mask 1).

    Where the new prompt repeats the sampled completion verbatim after the previous prompt,
    the remainder starts right after it. Otherwise the re-rendered turn's end is the first
    occurrence, in the new prompt beyond the previous prompt's length, of the previous
    completion's last token, provided the completion ended by sampling its end-of-turn token
    (finish ``stop`` or ``tool_calls``, and the token is one of the tokenizer's stop ids when a
    tokenizer is given). Otherwise the chain breaks: ``retry`` (the same prompt again),
    ``truncated`` (finish ``length``: no end-of-turn token to find) or ``unspliceable``; a
    prompt extending no chain's last prompt breaks with ``edited_history``.

    Sets ``invariant_relaxed`` and says so in the notes.
    """
    usable, tally = usable_calls(calls, context)
    tally.invariant_relaxed = True
    tally.notes.append(NOTE)
    family = context.family
    stop_ids = family.stop_ids if family is not None else None
    chains: list[SegmentBuilder] = []
    recency: Recency = {}
    for call in usable:
        assert call.prompt is not None
        # First a chain whose tokens the prompt repeats exactly (nothing to splice, as in
        # prefix_merge), then one whose last prompt it extends; most recently used first.
        target = next((i for i in reversed(recency) if chains[i].is_prefix_of(call.prompt)), None)
        if target is not None:
            chains[target].place(call)
        else:
            target, failure = _splice(chains, recency, call, stop_ids)
            if target is None:
                if chains:
                    tally.add_break(failure or EDITED_HISTORY, call)
                chains.append(SegmentBuilder())
                chains[-1].place(call)
                touch(recency, len(chains) - 1)
                continue
        tally.merges += 1
        touch(recency, target)
    return StrategyResult([c.build() for c in chains], tally.stats())


def _splice(
    chains: list[SegmentBuilder],
    recency: Recency,
    call: ResolvedCall,
    stop_ids: frozenset[int] | None,
) -> tuple[int | None, str | None]:
    """Splice ``call`` onto the chain whose last prompt is the longest prefix of its prompt.

    The longest such prompt is the call's closest predecessor: a shorter one is an ancestor
    (e.g. a request answered again differently), and splicing there would drop the turns in
    between. Returns the chain's index, or None and why it could not take the call.
    """
    prompt = call.prompt
    assert prompt is not None
    best: int | None = None
    best_len = -1
    for i in reversed(recency):  # ties go to the most recently used chain
        previous = chains[i].last_call
        assert previous is not None
        previous_len = previous.prompt_len
        assert previous_len is not None
        # The length first: building an old chain's prompt only when it could win.
        if previous_len <= best_len:
            continue
        previous_prompt = previous.prompt
        assert previous_prompt is not None
        if prompt.startswith(previous_prompt):
            best, best_len = i, previous_len
    if best is None:
        return None, None
    previous = chains[best].last_call
    assert previous is not None
    cut = _splice_point(previous, call, stop_ids)
    if isinstance(cut, str):
        return None, cut
    chains[best].add_context(prompt.data[cut * _ID_SIZE :])
    chains[best].add_completion(call)
    return best, None


def _splice_point(
    previous: ResolvedCall, call: ResolvedCall, stop_ids: frozenset[int] | None
) -> int | str:
    """Where ``call``'s prompt continues after ``previous``'s re-rendered turn, or why not."""
    assert previous.prompt is not None and previous.completion is not None
    assert call.prompt is not None
    if len(call.prompt) == len(previous.prompt):
        return RETRY  # the same request again, answered differently
    start = len(previous.prompt)
    sampled_end = start + len(previous.completion)
    if call.prompt.data[start * _ID_SIZE : sampled_end * _ID_SIZE] == previous.completion.data:
        # Re-rendered exactly as sampled (also a cut-off turn the template merely closed):
        # splice right after it, no end-of-turn token needed.
        return sampled_end
    if previous.finish_reason == "length":
        return TRUNCATED
    if previous.finish_reason not in _ENDED_BY_EOS or not len(previous.completion):
        return UNSPLICEABLE
    end = previous.completion.data[-_ID_SIZE:]
    if stop_ids is not None and previous.completion[-1] not in stop_ids:
        return UNSPLICEABLE
    data = call.prompt.data
    pos = len(previous.prompt) * _ID_SIZE
    # bytes.find is C-level; a hit off the 4-byte grid straddles two tokens and is skipped.
    while (pos := data.find(end, pos)) != -1:
        if pos % _ID_SIZE == 0:
            return pos // _ID_SIZE + 1
        pos += 1
    return UNSPLICEABLE
