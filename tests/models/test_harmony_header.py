"""gpt-oss as vLLM serves it: the prompt ends at ``<|start|>assistant``, the model writes the rest.

vLLM (openai-harmony) and gpt-oss's published template end a generation prompt at the role; the
model samples the channel header itself. renderers' harmony renderer opens an analysis channel
in the prompt instead, and its parser reads a completion only after such a header. Found on a
real vLLM (tests/models/test_parse_on_vllm.py): every gpt-oss answer was read as plain content,
its calls lost. The expected values here are harmony's format, written out by hand.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollstream.models.family import AnsweredTurn
from tests.loaded_families import loaded_family

pytestmark = pytest.mark.xdist_group("models")

SHELL: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "List the files."},
]
CALL = (
    "<|channel|>analysis<|message|>List them first.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.shell <|constrain|>json<|message|>{"command": "ls"}'
    "<|call|>"
)
ANSWER = (
    "<|channel|>analysis<|message|>All listed.<|end|><|start|>assistant"
    "<|channel|>final<|message|>Two files.<|return|>"
)


def _ids(text: str) -> list[int]:
    return loaded_family("gpt-oss").tokenizer.encode(text)


def test_the_generation_prompt_ends_at_the_role() -> None:
    family = loaded_family("gpt-oss")
    prompt = family.render_ids(MESSAGES, SHELL)
    tail = family.tokenizer.decode(prompt[-3:], skip_special_tokens=False)
    assert tail == "<|end|><|start|>assistant"


def test_a_call_written_after_that_prompt_is_read_as_a_call() -> None:
    family = loaded_family("gpt-oss")
    parsed = family.parse(_ids(CALL), family.render_ids(MESSAGES, SHELL), SHELL)
    assert parsed.parse_error is None
    assert parsed.reasoning == "List them first."
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("shell", {"command": "ls"})
    ]
    assert not parsed.content


def test_a_final_answer_is_content_and_its_analysis_reasoning() -> None:
    family = loaded_family("gpt-oss")
    parsed = family.parse(_ids(ANSWER), family.render_ids(MESSAGES, SHELL), SHELL)
    assert (parsed.content, parsed.reasoning, parsed.tool_calls) == (
        "Two files.",
        "All listed.",
        [],
    )


def test_a_continued_turn_ends_at_the_role_too() -> None:
    family = loaded_family("gpt-oss")
    prompt = family.render_ids(MESSAGES, SHELL)
    completion = _ids(CALL)
    parsed = family.parse(completion, prompt, SHELL)
    [call] = parsed.tool_calls
    function = {"name": "shell", "arguments": call.arguments}
    answer: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "reasoning_content": parsed.reasoning,
        "tool_calls": [{"id": "c1", "type": "function", "function": function}],
    }
    turn = AnsweredTurn(MESSAGES, SHELL, answer, prompt, completion)
    result = {"role": "tool", "tool_call_id": "c1", "content": "a.txt b.txt"}
    continued = family.continue_turn(turn, [result]).prompt_ids
    assert continued[: len(prompt) + len(completion)] == [*prompt, *completion]
    tail = family.tokenizer.decode(continued[-3:], skip_special_tokens=False)
    assert tail == "<|end|><|start|>assistant"


def test_each_render_is_dated_the_day_it_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM dates a harmony system message per request; a family lives across midnight.

    Before, the date was fixed when the family was made: a run crossing UTC midnight had its
    reference backend (made before) and its interceptor (made after) render different system
    messages, and exact context refused every gpt-oss session.
    """
    from rollstream.models import renderer_family

    family = loaded_family("gpt-oss")
    dates = []
    for day in ("2026-12-05", "2026-12-06"):
        monkeypatch.setattr(renderer_family, "today", lambda day=day: day)
        text = family.tokenizer.decode(family.render_ids(MESSAGES, SHELL), False)
        dates.append(text.split("Current date: ", 1)[1][:10])
    assert dates == ["2026-12-05", "2026-12-06"]
