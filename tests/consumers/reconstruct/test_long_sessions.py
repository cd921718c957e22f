"""Sessions of thousands of calls: one faithful trajectory, in memory bounded by the context."""

from __future__ import annotations

import tracemalloc

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.conversation import conversation
from rollstream.consumers.reconstruct.strategies import StrategyContext, prefix_merge, tree
from rollstream.dev.bench.long_sessions import LongSession, LongShape
from rollstream.schemas import CallRecord, decompress_json


def _calls(session: LongSession) -> list[CallRecord]:
    return [r for r in session.records() if isinstance(r, CallRecord)]


def test_a_3000_call_session_becomes_one_faithful_segment_and_keeps_its_conversation() -> None:
    # Was: the conversation's request chain recursed once per call (RecursionError), and the
    # reconstructor dead-lettered the session.
    session = LongSession("long", LongShape(calls=3000, final_tokens=8000, system_tokens=100))
    records = _calls(session)
    calls = resolve_calls(records)
    for strategy in (prefix_merge, tree):
        result = strategy(calls, StrategyContext(calls_reported=3000))
        (segment,) = result.segments
        assert segment.input_ids.data == session.context
        assert segment.call_ids == [c.call_id for c in records]
        assert result.stats.calls_used == 3000 and result.stats.breaks == 0
        assert check_segments(result.segments, {c.call_id: c for c in calls}) == []
    messages, final_text = conversation(records)
    assert messages is not None and final_text == "step 2999"
    history = decompress_json(messages)
    assert len(history) == 2 + 2 * 2999 + 1  # system, user, two items a turn, the answer
    assert history[-2] == {"role": "tool", "content": "output 2998"}


def test_resolving_and_merging_a_long_session_holds_a_few_contexts_not_every_prompt() -> None:
    # 1,000 calls growing to 50k tokens: their prompts together are ~100 MB; resolving,
    # merging and checking them must hold a bounded number of contexts (200 kB each) at once.
    shape = LongShape(calls=1000, final_tokens=50_000, system_tokens=1000)
    session = LongSession("mem", shape)
    records = _calls(session)
    context_bytes = shape.last_context_tokens * 4
    tracemalloc.start()
    try:
        calls = resolve_calls(records)
        result = prefix_merge(calls, StrategyContext(calls_reported=len(calls)))
        violations = check_segments(result.segments, {c.call_id: c for c in calls})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert violations == [] and len(result.segments) == 1
    all_prompts = sum(len(c.prompt or ()) for c in calls) * 4
    assert all_prompts > 400 * context_bytes  # what keeping every prompt would cost
    assert peak < 60 * context_bytes, f"peak {peak / 1e6:.1f} MB"


def test_a_long_session_that_breaks_at_every_call_classifies_every_break() -> None:
    # Every prompt re-renders the previous answer (drift): a new segment per call. Each break
    # is classified against recent segments and the delta base's, not all of them.
    shape = LongShape(calls=300, final_tokens=3000, system_tokens=100)
    records = []
    for record in _calls(LongSession("drift", shape)):
        prompt = record.prompt
        assert prompt is not None
        if prompt.base_call_id is not None:
            # One token short of the base's context, then a different token: the last
            # completion token was re-rendered.
            suffix = bytes([9, 9, 9, 0]) + prompt.suffix.data
            prompt = prompt.model_copy(
                update={"shared_len": prompt.shared_len - 1, "suffix": type(prompt.suffix)(suffix)}
            )
        records.append(record.model_copy(update={"prompt": prompt}))
    calls = resolve_calls(records)
    result = prefix_merge(calls, StrategyContext(calls_reported=len(calls)))
    assert len(result.segments) == 300
    assert result.stats.break_reasons == {"drift": 299}
    assert check_segments(result.segments, {c.call_id: c for c in calls}) == []
