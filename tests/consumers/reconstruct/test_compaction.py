"""Compaction as one rollout: where a thread goes on from a summary the policy wrote is marked."""

from __future__ import annotations

import random

import pytest
from hypothesis import given

from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.compaction import WINDOW, held, holds
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.schemas import Compaction, compress_json
from rollstream.schemas.packed import TokenIds
from tests.consumers.reconstruct.sessions import (
    SYSTEM,
    TOOL,
    USER,
    GeneratedSession,
    Message,
    Planted,
    SessionWriter,
    build_session,
    render,
    sessions,
    to_records,
)
from tests.consumers.reconstruct.test_strategies import PROPERTY, placed

#: The token strategies that start segments at breaks (per_call and retokenize have none).
BREAKING = ["prefix_merge", "tree", "prompt_prefix_merge"]


@pytest.mark.parametrize("strategy", BREAKING)
def test_the_call_going_on_from_a_summary_marks_a_compaction_boundary(strategy: str) -> None:
    session = build_session(["turn", "turn", "compaction", "turn", "turn"], seed=7)
    (summary,) = session.planted.summaries
    ids = [call.call_id for call in session.planned]
    resumed = ids[ids.index(summary) + 1]
    calls = session.resolved()
    result = get_strategy(strategy)(calls, StrategyContext())
    assert result.stats.break_reasons == {"compaction": 1}
    assert result.stats.compactions == [
        Compaction(summary_call_id=summary, resumed_call_id=resumed)
    ]
    # Every physical trace is kept, the summary's among them, and each stays faithful.
    assert sorted(placed(result.segments)) == sorted(session.used_ids)
    assert check_segments(result.segments, {c.call_id: c for c in calls}) == []


def test_a_summary_of_a_summary_is_a_second_boundary() -> None:
    session = build_session(["turn", "compaction", "compaction", "turn"], seed=11)
    first, second = session.planted.summaries
    stats = get_strategy("prefix_merge")(session.resolved(), StrategyContext()).stats
    assert [c.summary_call_id for c in stats.compactions] == [first, second]
    assert stats.compactions[0].resumed_call_id == second  # asked for with the first summary


def test_a_summary_sampled_with_split_tokens_is_still_found() -> None:
    # The sampler split four of its forty tokens unlike the tokenizer; the harness sent the text
    # back, re-tokenized whole. Every run of eight at the answer's own offsets has a split in
    # it, but most of the answer still stands in the new prompt.
    writer = SessionWriter(random.Random(13))
    conv: list[Message] = [(SYSTEM, writer.system), (USER, writer.text(4, 8))]
    writer.tool_turn(conv)
    whole = writer.text(40, 40)
    sampled = tuple(
        token
        for i, whole_token in enumerate(whole)
        for token in ((5001, 5002) if i in (4, 14, 24, 34) else (whole_token,))
    )
    asked = [*conv, (USER, (42, 43, 44, *writer.text(8, 12)))]
    summary = writer.call(asked, sampled, "stop")
    conv[:] = [(SYSTEM, writer.system), (USER, whole)]
    resumed = TokenIds.from_list(render(conv))
    writer.tool_turn(conv)
    assert summary.completion is not None
    assert not any(
        holds(resumed, TokenIds.from_list(summary.completion[i : i + WINDOW]))
        for i in range(0, len(summary.completion) - WINDOW + 1, WINDOW)
    )
    session = GeneratedSession(writer.planned, to_records(writer.planned), Planted())
    stats = get_strategy("prefix_merge")(session.resolved(), StrategyContext()).stats
    assert stats.compactions == [
        Compaction(summary_call_id=summary.call_id, resumed_call_id=writer.planned[-1].call_id)
    ]


def test_an_answer_quoted_in_a_few_short_runs_is_not_held() -> None:
    # The every-offset count still asks for a quarter of the answer: a few phrases in common
    # are not a summary.
    answer = list(range(1000, 1080))
    prompt = [7] * 50 + answer[10:19] + [7] * 50 + answer[40:49] + [7] * 50
    assert not held(TokenIds.from_list(prompt), TokenIds.from_list(answer))
    assert held(TokenIds.from_list(prompt + answer[50:70]), TokenIds.from_list(answer))


def test_a_history_the_harness_pruned_is_not_a_compaction() -> None:
    # Old tool output cleared (opencode's pruning, Claude Code's micro-compaction): the long
    # answer sent back still stands in the new prompt, but after the message it answered.
    writer = SessionWriter(random.Random(3))
    conv: list[Message] = [(SYSTEM, writer.system), (USER, writer.text(4, 8))]
    writer.tool_turn(conv)
    old_output = len(conv) - 1
    writer.tool_turn(conv)
    answer = writer.call(conv, writer.text(16, 20), "stop")
    conv.append((USER, writer.text(3, 5)))
    conv[old_output] = (TOOL, (77,))  # cleared
    writer.tool_turn(conv)
    writer.call(conv, writer.text(2, 4), "stop")
    assert answer.completion is not None and len(answer.completion) > 12
    session = GeneratedSession(writer.planned, to_records(writer.planned), Planted())
    stats = get_strategy("prefix_merge")(session.resolved(), StrategyContext()).stats
    assert stats.break_reasons == {"edited_history": 1}
    assert stats.compactions == []


def test_a_summary_request_quoting_a_turn_that_called_tools_resumes_nothing() -> None:
    # opencode writes the history out as text for its summary's request: the answer of a turn
    # that called a tool stands in it, the end of that turn's prompt not (another template).
    writer = SessionWriter(random.Random(5))
    conv: list[Message] = [(SYSTEM, writer.system), (USER, writer.text(4, 8))]
    turn = writer.call(conv, (*writer.text(8, 10), *writer.tool_call()), "tool_calls")
    assert turn.completion is not None
    quoted = tuple(turn.completion[:-1])  # its answer, as the text of a user message
    writer.call([(SYSTEM, (7, 7, 7)), (USER, (*writer.text(3, 4), *quoted))], (50, 51), "stop")
    records = to_records(writer.planned)
    session = GeneratedSession(writer.planned, records, Planted())
    stats = get_strategy("prefix_merge")(session.resolved(), StrategyContext()).stats
    assert stats.compactions != []  # told by tokens alone, it looks like one
    message = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function"}]}
    records[0] = records[0].model_copy(
        update={"response": compress_json({"choices": [{"message": message}]})}
    )
    session = GeneratedSession(writer.planned, records, Planted())
    stats = get_strategy("prefix_merge")(session.resolved(), StrategyContext()).stats
    assert stats.break_reasons == {"edited_history": 1} and stats.compactions == []


@PROPERTY
@given(sessions())
def test_only_summaries_are_taken_for_compactions(session: GeneratedSession) -> None:
    # Side calls, sub-agents, drift, truncation, retries: none is a compaction; a boundary
    # always names a call that wrote a summary.
    for strategy in BREAKING:
        result = get_strategy(strategy)(session.resolved(), StrategyContext())
        found = {c.summary_call_id for c in result.stats.compactions}
        assert found <= set(session.planted.summaries), strategy
        assert result.stats.break_reasons.get("compaction", 0) == len(result.stats.compactions)
