"""Exact context: the next prompt as token ids, the model's own sampled tokens kept.

A server re-renders the whole conversation through the chat template on every call, and the
re-rendered assistant turns need not be the tokens the model sampled (tool-call JSON
re-serialised, two sampled tokens merged by BPE, reasoning dropped). When a call extends the
session's previous one append-only, the prompt can instead be built from tokens:

    previous prompt ids + previous completion ids (+ end-of-turn if it was cut)
      + ids of the text the template puts after that end-of-turn for the new messages

The last part is found by rendering the conversation twice, with and without the new messages,
and taking what the template adds after the assistant turn's end-of-turn token. That is only
sound when the template renders an assistant turn as its content followed by the end-of-turn
token and then text that does not depend on the content: :func:`check_template` verifies it on
a small conversation before the mode is used.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rollstream.errors import ConfigurationError
from rollstream.models.tokenizer import ChatTokenizer, normalize_messages

Message = dict[str, Any]


class TemplateSplitError(ConfigurationError):
    """The chat template cannot be continued token-wise (exact-context mode is refused)."""


@dataclass(frozen=True)
class Continuation:
    """The ids that follow a sampled completion, and whether an end-of-turn had to be added."""

    ids: list[int]
    appended_end_of_turn: bool
    text: str


def _end_of_turn(tokenizer: ChatTokenizer) -> str:
    return tokenizer.token_text(tokenizer.eos_id)


def continuation_text(
    tokenizer: ChatTokenizer,
    history: Sequence[Message],
    assistant: Message,
    new: Sequence[Message],
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """What the template renders after ``assistant``'s end-of-turn for ``new`` messages.

    Includes the generation prompt of the next assistant turn. Raises TemplateSplitError when
    the template is not append-only here or does not close the turn with its end-of-turn token.
    """
    before = tokenizer.render([*history, assistant], tools, add_generation_prompt=False)
    full = tokenizer.render([*history, assistant, *new], tools, add_generation_prompt=True)
    if not full.startswith(before):
        raise TemplateSplitError(
            "the chat template re-renders earlier turns when messages are added "
            "(not append-only): the prompt cannot be continued token-wise"
        )
    eot = _end_of_turn(tokenizer)
    cut = before.rfind(eot)
    if cut < 0:
        raise TemplateSplitError(f"the assistant turn does not end with {eot!r}")
    return before[cut + len(eot) :] + full[len(before) :]


def continue_prompt(
    tokenizer: ChatTokenizer,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    text: str,
) -> tuple[list[int], Continuation]:
    """The next prompt's ids: the previous prompt, the sampled completion, then ``text``.

    A completion cut by length (no stop token at its end) gets the end-of-turn token the
    template would have written: the model did not sample it, and the record says so.
    """
    appended = not completion_ids or completion_ids[-1] not in tokenizer.stop_ids
    head = [*prompt_ids, *completion_ids]
    if appended:
        head.append(tokenizer.eos_id)
    tail = tokenizer.encode(text)
    return head + tail, Continuation(tail, appended, text)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def same_answer(echoed: Message, answer: Message) -> bool:
    """Whether the harness's copy of an assistant turn is the answer it was given.

    Harnesses trim whitespace and re-serialise tool-call arguments; ids may be renamed. What
    must stay: the text, and each call's name and parsed arguments, in order.
    """
    if echoed.get("role") != "assistant":
        return False
    if _text(echoed.get("content")).strip() != _text(answer.get("content")).strip():
        return False
    ours = answer.get("tool_calls") or []
    theirs = echoed.get("tool_calls") or []
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs, strict=True):
        fa, fb = a.get("function") or {}, b.get("function") or {}
        if fa.get("name") != fb.get("name"):
            return False
        if _arguments(fa.get("arguments")) != _arguments(fb.get("arguments")):
            return False
    return True


def appended_messages(
    previous: Sequence[Message], answer: Message, current: Sequence[Message]
) -> list[Message] | None:
    """The messages ``current`` adds after the previous call's conversation and its answer.

    None when ``current`` is not ``previous`` + the answer + more: the history was edited
    (compaction), it is another thread (a side call, a sub-agent), or nothing was added.
    """
    n = len(previous)
    if len(current) <= n + 1:
        return None
    if normalize_messages(list(current[:n])) != normalize_messages(list(previous)):
        return None
    if not same_answer(current[n], answer):
        return None
    return list(current[n + 1 :])


@dataclass(frozen=True)
class TemplateCheck:
    """The self-check's verdict; ``reason`` says why the mode is refused."""

    ok: bool
    reason: str = ""


def check_template(tokenizer: ChatTokenizer) -> TemplateCheck:
    """Render a small conversation both ways; refuse when the template cannot be split.

    The continuation after an assistant turn must not depend on what the assistant said (a
    plain answer or a tool call), and full renders must extend earlier ones.
    """
    tool = {
        "type": "function",
        "function": {"name": "shell", "parameters": {"type": "object", "properties": {}}},
    }
    history: list[Message] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List the files."},
    ]
    plain = {"role": "assistant", "content": "Here they are."}
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call-1",
                "type": "function",
                "function": {"name": "shell", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    follow_ups: list[list[Message]] = [
        [{"role": "user", "content": "And now?"}],
        [{"role": "tool", "tool_call_id": "call-1", "content": "a.txt"}],
    ]
    try:
        for new in follow_ups:
            texts = {continuation_text(tokenizer, history, a, new, [tool]) for a in (plain, call)}
            if len(texts) != 1:
                return TemplateCheck(False, "what follows an assistant turn depends on its content")
        eot = _end_of_turn(tokenizer)
        closed = tokenizer.render([*history, plain], [tool], add_generation_prompt=False)
        if f"{plain['content']}{eot}" not in closed:
            return TemplateCheck(False, f"an assistant turn is not its content then {eot!r}")
    except TemplateSplitError as exc:
        return TemplateCheck(False, str(exc))
    except Exception as exc:  # the template itself failed: no exact context with it
        return TemplateCheck(False, f"the chat template failed: {type(exc).__name__}: {exc}")
    return TemplateCheck(True)
