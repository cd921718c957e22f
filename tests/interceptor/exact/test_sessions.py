"""Exact-context planning per session: continue the thread a call extends, else say why not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.interceptor.exact.sessions import (
    EVICTED,
    FIRST_CALL,
    NOT_APPENDED,
    TOOLS_CHANGED,
    UNKNOWN_TURN,
    ExactContext,
)
from rollstream.models.family import ContinuationError
from rollstream.models.template_family import TemplateFamily
from rollstream.models.tokenizer import ChatTokenizer
from tests.models.test_template_family import _tokenizer_with_template

Message = dict[str, Any]


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


def answer_of(text: str) -> Message:
    return {"role": "assistant", "content": text}


def sampled(tok: ChatTokenizer, text: str) -> list[int]:
    return [*tok.encode(text), tok.eos_id]


def test_a_thread_is_continued_and_a_side_call_does_not_break_it(
    tokenizer: ChatTokenizer,
) -> None:
    context = ExactContext(TemplateFamily(tokenizer))
    main: list[Message] = [{"role": "user", "content": "fix the bug"}]
    assert context.plan("s", {"messages": main}).note == FIRST_CALL
    prompt = tokenizer.encode(tokenizer.render(main))
    completion = sampled(tokenizer, "Looking")
    context.remember("s", {"messages": main}, answer_of("Looking"), prompt, completion)

    side: list[Message] = [{"role": "user", "content": "title for: fix the bug"}]
    side_plan = context.plan("s", {"messages": side})
    assert side_plan.prompt_ids is None and side_plan.note == NOT_APPENDED
    context.remember("s", {"messages": side}, answer_of("Bug fix"), [1], sampled(tokenizer, "x"))

    follow: list[Message] = [*main, answer_of("Looking"), {"role": "user", "content": "go on"}]
    plan = context.plan("s", {"messages": follow})
    assert plan.note == "exact" and plan.prompt_ids is not None
    assert plan.prompt_ids[: len(prompt) + len(completion)] == prompt + completion
    assert tokenizer.decode(plan.prompt_ids, False) == tokenizer.render(follow)
    assert context.plan("other", {"messages": follow}).note == FIRST_CALL


def test_changed_tools_and_edited_history_fall_back(tokenizer: ChatTokenizer) -> None:
    context = ExactContext(TemplateFamily(tokenizer))
    tools: Any = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]
    first: list[Message] = [{"role": "user", "content": "q"}]
    context.remember(
        "s", {"messages": first, "tools": tools}, answer_of("a"), [5], sampled(tokenizer, "a")
    )
    follow = [*first, answer_of("a"), {"role": "user", "content": "more"}]
    assert context.plan("s", {"messages": follow, "tools": tools}).note == "exact"
    assert context.plan("s", {"messages": follow}).note == TOOLS_CHANGED
    compacted = [{"role": "user", "content": "summary"}, {"role": "user", "content": "more"}]
    assert context.plan("s", {"messages": compacted, "tools": tools}).note == NOT_APPENDED


def test_a_thread_that_moved_on_replaces_its_old_turn_and_memory_is_bounded(
    tokenizer: ChatTokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    context = ExactContext(TemplateFamily(tokenizer), sessions=2, turns=2)
    first: list[Message] = [{"role": "user", "content": "q"}]
    context.remember("s", {"messages": first}, answer_of("a"), [5], sampled(tokenizer, "a"))
    second = [*first, answer_of("a"), {"role": "user", "content": "b"}]
    context.remember("s", {"messages": second}, answer_of("c"), [6], sampled(tokenizer, "c"))
    # The first turn was replaced: a retry of the second call no longer continues it.
    retry = [*first, answer_of("a"), {"role": "user", "content": "other"}]
    assert context.plan("s", {"messages": retry}).note == NOT_APPENDED
    for session in ("t", "u"):
        context.remember(session, {"messages": first}, answer_of("a"), [5], [2])
    # "s" was evicted for room: its next call says so, a log line and the counter show it.
    assert len(context) == 2 and context.plan("s", {"messages": second}).note == EVICTED
    assert context.evicted == 1 and "session s evicted" in caplog.text
    assert context.plan("never-seen", {"messages": first}).note == FIRST_CALL
    context.forget("s")
    assert context.plan("s", {"messages": second}).note == FIRST_CALL


def test_a_template_that_cannot_be_split_refuses_the_mode(tmp_path: Path) -> None:
    counting = (
        "{{- 'turns: ' ~ (messages | length) ~ '\\n' }}"
        "{%- for m in messages %}{{- m.role + ': ' + (m.content or '') + '<|im_end|>\\n' }}"
        "{%- endfor %}"
    )
    with pytest.raises(ContinuationError, match="exact context refused"):
        ExactContext(TemplateFamily(_tokenizer_with_template(tmp_path, counting)))


def test_an_answered_turn_never_kept_is_not_rendered_by_the_template(
    tokenizer: ChatTokenizer,
) -> None:
    context = ExactContext(TemplateFamily(tokenizer))
    first: list[Message] = [{"role": "user", "content": "fix the bug"}]
    context.remember(
        "s", {"messages": first}, answer_of("Looking"), [1, 2], sampled(tokenizer, "Looking")
    )
    # The second call failed (not kept); the third echoes its answer after the first one's.
    third: list[Message] = [
        *first,
        answer_of("Looking"),
        {"role": "user", "content": "go on"},
        answer_of("Found it"),
        {"role": "user", "content": "fix it"},
    ]
    plan = context.plan("s", {"messages": third})
    assert plan.prompt_ids is None and plan.note == UNKNOWN_TURN
