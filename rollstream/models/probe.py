"""The self-check of a family before exact context uses it: a small agent conversation, both ways.

A family passes when (1) its parser reads back the tool call its own renderer wrote, and (2) a
sampled turn can be continued with a tool result (and, for the generic family, what follows an
assistant turn does not depend on what it said). Every refusal says which of these failed and
why, in words a user can act on.
"""

from __future__ import annotations

import json
from typing import Any

from rollstream.models.family import (
    AnsweredTurn,
    ContinuationError,
    Family,
    Message,
    Verdict,
)

#: A tool as harnesses describe theirs (a description included: some templates require one).
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command."}},
            "required": ["command"],
        },
    },
}
HISTORY: list[Message] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "List the files."},
]


def _call(call_id: str, command: str, reasoning: str | None) -> Message:
    message: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "shell", "arguments": json.dumps({"command": command})},
            }
        ],
    }
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


_DEPENDS = "what follows an assistant turn depends on its content"


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def _result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": "shell", "content": text}


def _reads_back(family: Family, answer: Message) -> str | None:
    """Why the family's parser does not give back the call its renderer wrote, or None."""
    prompt = family.render_ids(HISTORY, [TOOL], add_generation_prompt=True)
    completion = family.completion_ids(HISTORY, answer, [TOOL])
    parsed = family.parse(completion, prompt, [TOOL])
    want = answer["tool_calls"][0]["function"]
    got = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
    if got != [(want["name"], json.loads(want["arguments"]))]:
        text = family.tokenizer.decode(completion, skip_special_tokens=False)
        return (
            f"the {family.name} family's parser does not read back the tool call its template "
            f"writes (wrote {text[:120]!r}, read {got or parsed.parse_error or 'no call'})"
        )
    return None


def _continue(family: Family, answer: Message, new: list[Message]) -> list[int]:
    prompt = family.render_ids(HISTORY, [TOOL], add_generation_prompt=True)
    completion = family.completion_ids(HISTORY, answer, [TOOL])
    turn = AnsweredTurn(HISTORY, [TOOL], answer, prompt, completion)
    return family.continue_turn(turn, new).prompt_ids[len(prompt) + len(completion) :]


def probe_continuation(family: Family) -> Verdict:
    """A renderer family: its parser reads its calls back, and a tool turn can be continued."""
    reasoning = "I should list them." if family.thinks else None
    call_id = family.call_id("shell", 0)
    answer = _call(call_id, "ls", reasoning)
    try:
        reason = _reads_back(family, answer)
        if reason is not None:
            return Verdict(False, reason)
        _continue(family, answer, [_result(call_id, "a.txt")])
    except ContinuationError as exc:
        return Verdict(False, str(exc))
    except Exception as exc:  # the renderer failed on an ordinary conversation
        return Verdict(False, f"the {family.name} renderer failed: {type(exc).__name__}: {exc}")
    return Verdict(True)


def probe_template(family: Family) -> Verdict:
    """The generic family: calls read back, and continuations independent of what was said."""
    try:
        plain = [
            _continue(family, {"role": "assistant", "content": text}, [_user("And now?")])
            for text in ("Here they are.", "There are none.")
        ]
        if plain[0] != plain[1]:
            return Verdict(False, _DEPENDS)
        reason = _reads_back(family, _call("call00001", "ls", None))
        if reason is not None:
            return Verdict(False, reason + "; name the model's family with --family")
        calls = [
            _continue(family, _call("call00001", cmd, None), [_result("call00001", "a.txt")])
            for cmd in ("ls", "pwd")
        ]
    except ContinuationError as exc:
        return Verdict(False, str(exc))
    except Exception as exc:  # the template itself failed: say so, not "not append-only"
        return Verdict(
            False,
            f"the chat template failed on the check's conversation: {type(exc).__name__}: {exc}",
        )
    if calls[0] != calls[1]:
        return Verdict(False, _DEPENDS)
    return Verdict(True)
