"""Synthetic sessions: well-formed records whose delta-encoded prompts resolve exactly."""

from __future__ import annotations

from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import (
    AvroSerializer,
    CallRecord,
    SessionEnded,
    SessionStarted,
    TokenIds,
    resolve_prompt,
)


def test_session_shape_and_delta_encoding() -> None:
    shape = SyntheticShape(turns=6, system_tokens=100, tool_result_tokens=20, completion_tokens=10)
    session = synthetic_session("s", shape, seed=3)
    assert isinstance(session.records[0], SessionStarted)
    assert isinstance(session.records[-1], SessionEnded)
    assert session.records[-1].call_count == 6
    calls = session.calls
    assert [c.seq for c in calls] == list(range(6))
    assert calls[0].prompt is not None and calls[0].prompt.is_full
    contexts: dict[str, TokenIds] = {}
    for call in calls:
        assert call.prompt is not None and call.completion_token_ids is not None
        prompt = resolve_prompt(call.prompt, contexts.get)
        assert prompt == session.prompts[call.call_id]
        if call.seq:
            # Only the new tool result travels: everything before is shared with the last call.
            assert len(call.prompt.suffix) == shape.tool_result_tokens
        contexts[call.call_id] = prompt + call.completion_token_ids
    assert len(session.prompts[calls[-1].call_id]) == 100 + 5 * (10 + 20)


def test_encoded_session_is_smaller_than_its_full_prompts() -> None:
    session = synthetic_session("s", SyntheticShape(turns=20))
    serializer = AvroSerializer()
    encoded = sum(len(serializer.encode(r)) for r in session.records)
    full_prompts = sum(4 * len(p) for p in session.prompts.values())
    assert encoded < full_prompts / 3
    assert all(
        isinstance(serializer.decode(serializer.encode(c)), CallRecord) for c in session.calls
    )


def test_same_seed_same_session() -> None:
    a = synthetic_session("s", seed=1)
    b = synthetic_session("s", seed=1)
    assert [c.completion_token_ids for c in a.calls] == [c.completion_token_ids for c in b.calls]
