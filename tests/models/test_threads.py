"""Which calls continue an answered turn: the harness's echo of the answer matched loosely."""

from __future__ import annotations

from typing import Any

from rollstream.models.threads import appended_messages, same_answer

Message = dict[str, Any]


def test_appended_messages_only_for_an_append_only_continuation() -> None:
    previous: list[Message] = [{"role": "user", "content": "q"}]
    answer = {
        "role": "assistant",
        "content": "ok ",
        "tool_calls": [{"id": "x", "function": {"name": "shell", "arguments": '{"a": 1}'}}],
    }
    echoed: Message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],  # parts, trimmed
        "tool_calls": [{"id": "renamed", "function": {"name": "shell", "arguments": '{ "a":1 }'}}],
    }
    tool: Message = {"role": "tool", "tool_call_id": "renamed", "content": "1"}
    assert appended_messages(previous, answer, [*previous, echoed, tool]) == [tool]
    assert appended_messages(previous, answer, [*previous, echoed]) is None  # nothing new
    edited: list[Message] = [{"role": "user", "content": "q, summarised"}, echoed, tool]
    assert appended_messages(previous, answer, edited) is None  # compaction
    other = {**echoed, "tool_calls": [{"function": {"name": "shell", "arguments": '{"a": 2}'}}]}
    assert appended_messages(previous, answer, [*previous, other, tool]) is None
    assert not same_answer({"role": "user", "content": "ok"}, answer)
