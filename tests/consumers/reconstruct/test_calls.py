"""resolve_calls: order, at-least-once deliveries, delta-encoded prompts, missing tokens."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.schemas import CallRecord, CallStatus, PromptTokens, TokenIds
from tests.consumers.reconstruct.sessions import (
    GeneratedSession,
    PlannedCall,
    build_session,
    sessions,
    to_records,
)


def planned(n: int) -> list[PlannedCall]:
    """A linear conversation: each prompt is the previous prompt + completion + 3 tokens."""
    calls = []
    prompt = list(range(100, 130))
    for i in range(n):
        completion = [1000 + 10 * i + k for k in range(4)]
        calls.append(
            PlannedCall(f"c{i}", list(prompt), completion, [-0.5] * 4, "stop", CallStatus.OK)
        )
        prompt = prompt + completion + [7, 8, 9]
    return calls


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_every_generated_session_resolves_to_its_plan(session: GeneratedSession) -> None:
    resolved = session.resolved()
    assert [c.call_id for c in resolved] == [p.call_id for p in session.planned]
    for call, plan in zip(resolved, session.planned, strict=True):
        if plan.prompt is None:
            assert call.prompt is None and call.completion is None
            assert (
                call.missing_reason
                == {
                    CallStatus.OK: "no_token_ids",
                    CallStatus.ERROR: "failed",
                    CallStatus.CANCELLED: "cancelled",
                }[plan.status]
            )
        else:
            assert call.prompt is not None and call.prompt.to_list() == plan.prompt
            assert call.completion is not None and call.completion.to_list() == plan.completion
            assert call.missing_reason is None and call.has_tokens
        assert (call.logprobs is None) == (plan.logprobs is None)
        assert call.status is plan.status and call.finish_reason == plan.finish


def test_order_by_seq_then_call_id_and_first_delivery_wins() -> None:
    records = to_records(planned(4), min_shared=1)
    late = records[2].model_copy(update={"seq": 9})
    twin = records[1].model_copy(update={"call_id": "c0", "finish_reason": "length"})
    shuffled = [records[3], late, records[1], records[0], twin]
    random.Random(0).shuffle(shuffled)
    resolved = resolve_calls(shuffled)
    # The twin re-uses c0's id at seq 1: (seq, call_id) order puts c0 first, so it wins.
    assert [(c.call_id, c.seq) for c in resolved] == [("c0", 0), ("c1", 1), ("c3", 3), ("c2", 9)]
    assert resolved[0].finish_reason == "stop"
    # c3 is delta-encoded against c2, which now sorts after it: the base must come first.
    assert resolved[2].missing_reason == "unresolvable_prompt"


def test_repeated_deliveries_are_dropped() -> None:
    records = to_records(planned(3))
    resolved = resolve_calls([*records, records[1], records[0]])
    assert [c.call_id for c in resolved] == ["c0", "c1", "c2"]


def test_delta_prompts_resolve_against_prompt_plus_completion() -> None:
    plan = planned(3)
    records = to_records(plan, min_shared=1)
    assert records[2].prompt is not None and records[2].prompt.base_call_id == "c1"
    assert len(records[2].prompt.suffix) == 3  # only the new tokens travel
    resolved = resolve_calls(records)
    assert [c.prompt.to_list() if c.prompt else None for c in resolved] == [p.prompt for p in plan]
    context, prompt = resolved[1].context(), resolved[2].prompt
    assert context is not None and prompt is not None and prompt.startswith(context)


def with_prompt(record: CallRecord, prompt: PromptTokens) -> CallRecord:
    return record.model_copy(update={"prompt": prompt})


def test_unknown_or_short_base_is_unresolvable_and_so_are_its_dependents() -> None:
    records = to_records(planned(4), min_shared=1)
    assert records[2].prompt is not None and records[3].prompt is not None
    unknown = with_prompt(
        records[1],
        PromptTokens(base_call_id="lost", shared_len=5, suffix=TokenIds.from_list([1])),
    )
    too_short = with_prompt(
        records[2],
        PromptTokens(base_call_id="c0", shared_len=10_000, suffix=TokenIds.from_list([1])),
    )
    resolved = resolve_calls([records[0], unknown, too_short, records[3]])
    assert [c.missing_reason for c in resolved] == [
        None,
        "unresolvable_prompt",
        "unresolvable_prompt",
        "unresolvable_prompt",  # based on c2, which could not be resolved
    ]
    assert all(c.prompt is None and c.completion is None for c in resolved[1:])
    assert resolved[1].record is unknown  # kept, e.g. for retokenize


def test_missing_token_reasons_follow_the_status() -> None:
    session = build_session(["no_tokens", "failed", "cancelled"], seed=11)
    by_status = {(c.status, c.missing_reason) for c in session.resolved() if not c.has_tokens}
    assert (CallStatus.OK, "no_token_ids") in by_status
    assert by_status <= {
        (CallStatus.OK, "no_token_ids"),
        (CallStatus.ERROR, "failed"),
        (CallStatus.CANCELLED, "cancelled"),
    }


def test_fields_are_carried_over() -> None:
    session = build_session(["failed"], seed=12)
    failed = next(c for c in session.resolved() if c.status is CallStatus.ERROR)
    assert failed.error_type == "upstream_http" and failed.policy_version == 0
    ok = session.resolved()[-1]
    assert ok.error_type is None and ok.logprobs is not None and ok.finish_reason == "stop"
