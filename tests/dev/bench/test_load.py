"""The synthetic load of the Kafka benchmarks: encodings, rendered text, renamed copies."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rollstream.dev.bench.load import Encoding, encoded, renamed, render_text
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import (
    AvroRecord,
    CallRecord,
    SessionEnded,
    SessionStarted,
    resolve_prompt,
)
from rollstream.schemas.calls import SessionRequests
from rollstream.schemas.packed import TokenIds

SHAPE = SyntheticShape(turns=4, system_tokens=40, tool_result_tokens=6, completion_tokens=3)


def _calls(records: list[AvroRecord]) -> list[CallRecord]:
    return [r for r in records if isinstance(r, CallRecord)]


@given(st.lists(st.integers(0, 32_767), max_size=50))
def test_render_text_is_four_characters_a_token_and_one_to_one(ids: list[int]) -> None:
    text = render_text(TokenIds.from_list(ids))
    assert len(text) == 4 * len(ids)
    words = text.split(" ")[:-1] if ids else []
    assert [len(w) for w in words] == [3] * len(ids)
    # Same id, same word; different ids, different words: the text carries the ids.
    assert len(set(zip(ids, words, strict=True))) == len(set(ids)) == len(set(words))


def test_delta_is_the_synthetic_session_and_naive_carries_full_prompts() -> None:
    session = synthetic_session("s", SHAPE)
    assert encoded(session, Encoding.DELTA) == session.records
    naive = _calls(encoded(session, Encoding.NAIVE))
    assert [c.prompt.suffix if c.prompt else None for c in naive] == [
        session.prompts[c.call_id] for c in naive
    ]
    assert all(c.prompt is not None and c.prompt.is_full for c in naive)
    delta = _calls(session.records)
    assert sum(len(c.prompt.suffix) for c in delta if c.prompt) < sum(
        len(c.prompt.suffix) for c in naive if c.prompt
    )


def test_harness_requests_carry_the_conversation_so_far() -> None:
    session = synthetic_session("s", SHAPE)
    calls = _calls(encoded(session, Encoding.DELTA_WITH_REQUEST))
    requests = SessionRequests(calls)  # delta-encoded as the interceptor writes them
    for k, call in enumerate(calls):
        assert call.harness_request is not None
        assert (call.harness_request_base is None) == (k == 0)
        request = requests.harness(call.call_id)
        assert requests.upstream(call.call_id)["messages"] == request["messages"]
        messages = request["messages"]
        assert [m["role"] for m in messages] == ["system"] + ["assistant", "tool"] * k
        # Every prompt token is in the text, four characters each.
        assert sum(len(m["content"]) for m in messages) == 4 * len(session.prompts[call.call_id])
        assert call.prompt == session.records[k + 1].prompt  # type: ignore[attr-defined]
    first = requests.harness(calls[0].call_id)
    assert first["messages"][0]["content"] == render_text(session.prompts[calls[0].call_id])


def test_renamed_copy_is_a_session_of_its_own_with_the_same_tokens() -> None:
    session = synthetic_session("orig", SHAPE)
    copy = renamed(session.records, "orig", "copy-7")
    assert all(r.session_id == "copy-7" for r in copy)  # type: ignore[attr-defined]
    lifecycle = [r for r in copy if isinstance(r, SessionStarted | SessionEnded)]
    assert [r.group_id for r in lifecycle] == ["g-copy-7", "g-copy-7"]
    calls = _calls(copy)
    assert [c.call_id for c in calls] == [f"copy-7-call-{k}" for k in range(SHAPE.turns)]
    contexts: dict[str, TokenIds] = {}
    for c in calls:
        assert c.prompt is not None
        if c.prompt.base_call_id is not None:
            assert c.prompt.base_call_id in contexts  # bases name the copy's own calls
        prompt = resolve_prompt(c.prompt, contexts.get)
        original = session.prompts[c.call_id.replace("copy-7", "orig", 1)]
        assert prompt == original
        contexts[c.call_id] = prompt + (c.completion_token_ids or TokenIds())
    assert _calls(session.records)[0].call_id == "orig-call-0"  # the original is untouched
