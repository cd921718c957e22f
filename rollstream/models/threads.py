"""Exact context: which calls continue an answered turn, and with which new messages.

A server re-renders the whole conversation through the chat template on every call, and the
re-rendered assistant turns need not be the tokens the model sampled (tool-call JSON
re-serialised, two sampled tokens merged by BPE, reasoning dropped). When a call extends an
answered turn append-only, the prompt is instead built from tokens by the model family
(:meth:`rollstream.models.family.Family.continue_turn`): the previous prompt, the sampled
completion, then the new messages in the family's framing. This module decides whether a
call's conversation is such an extension, matching the harness's echo of the answer loosely.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rollstream.models.tokenizer import normalize_messages

Message = dict[str, Any]


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
