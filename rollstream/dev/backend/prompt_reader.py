"""Reading a raw prompt (token ids a model family rendered) the way the scripted policy needs.

``/v1/completions`` with token ids (the interceptor's exact-context mode) carries no messages and
no tools: the scripted policy must find in the ids which tools the conversation offers and how
far its scenario has got. Nothing here knows a family's format: the family itself is probed once
(a conversation with a placeholder tool rendered) to learn how it writes a tool's name, which
tokens open an assistant turn, and its parser tells whether an earlier turn called tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rollstream.models.family import Family, Message

#: A tool name no real prompt holds: where the family writes it shows how it writes any name.
PLACEHOLDER = "zqxprobetool"
#: Characters of context kept before a name: enough to tell a name from prose, short enough
#: not to reach into the tool's description or a harness's key order.
_BEFORE = 8


def probe_tool(name: str) -> dict[str, Any]:
    """A one-argument function tool named ``name``."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "Probe.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "A command."}},
                "required": ["command"],
            },
        },
    }


def _common_prefix(*seqs: Sequence[int]) -> list[int]:
    out: list[int] = []
    for items in zip(*seqs, strict=False):
        if any(item != items[0] for item in items):
            break
        out.append(items[0])
    return out


class PromptReader:
    """What a family-rendered prompt offers and how many tool-calling turns it ends with.

    A tool is offered when the prompt writes its name as the family writes a declared or called
    tool's name. A family whose prompt declares no tools (DeepSeek V3) shows only the tools
    earlier turns called.
    """

    def __init__(self, family: Family, names: Iterable[str]) -> None:
        self.family = family
        self.names = list(dict.fromkeys(names))
        user: list[Message] = [{"role": "user", "content": "hi"}]
        call = {
            "id": f"functions.{PLACEHOLDER}:0",
            "type": "function",
            "function": {"name": PLACEHOLDER, "arguments": '{"command": "ls"}'},
        }
        calling: Message = {"role": "assistant", "content": "", "tool_calls": [call]}
        result: Message = {"role": "tool", "tool_call_id": call["id"], "content": "ok"}
        tools = [probe_tool(PLACEHOLDER)]
        text = self._decode(family.render_ids([*user, calling, result], tools, True))
        self.contexts = self._name_contexts(text)
        # Assistant turns as the family writes them: the one being sampled, and earlier ones
        # with and without reasoning, before and after a later user message (Qwen3 writes an
        # empty reasoning block in some).
        answer: Message = {"role": "assistant", "content": "Done."}
        thought: Message = {**answer, "reasoning_content": "Thought."}
        later: Message = {"role": "user", "content": "more"}
        base = family.render_ids(user, tools, False)
        renders = [
            family.render_ids(user, tools, True),
            family.render_ids([*user, answer], tools, False),
            family.render_ids([*user, thought], tools, False),
            family.render_ids([*user, answer, later], tools, False),
            family.render_ids([*user, thought, later], tools, False),
            family.render_ids([*user, calling, result, later], tools, False),
            family.render_ids([*user, calling, result], tools, True),
        ]
        heads = [ids[len(base) :] for ids in renders if ids[: len(base)] == base]
        header = _common_prefix(*heads) if len(heads) == len(renders) else []
        #: Token sequences an assistant turn starts after: its header, and what ends a tool
        #: result where the family writes no header there (DeepSeek answers right after it).
        self.markers = [header] if header else []
        results = family.render_ids([*user, calling, result], tools, False)
        after = renders[-1]
        if not header:
            # No assistant header at all (Mistral answers right after [/INST] or
            # [/TOOL_RESULTS]): a turn starts after what ends a user turn or a tool result.
            self.markers = [ids[-1:] for ids in (renders[0], results) if ids]
        elif after[: len(results)] == results:
            opening = after[len(results) :]
            if opening[: len(header)] != header:
                self.markers.append([*results[-1:], *opening])
        #: Tokens that end an assistant message in history: the stop tokens, and what follows
        #: an answer's text (Harmony's <|end|>, which the model never samples as a stop).
        self.ends = set(family.stop_ids)
        tail = renders[3][len(base) + len(header) :]
        for k in range(len(tail)):
            if "Done." in self._decode(tail[:k]):
                self.ends.add(tail[k])
                break
        # Whether the parser reads a turn with its header (Harmony's) or without (the rest).
        probe = family.render_ids([*user, calling], tools, False)[len(base) :]
        self.with_header = not family.parse(probe[len(header) :]).tool_calls and bool(
            family.parse(probe).tool_calls
        )

    def _decode(self, ids: Sequence[int]) -> str:
        return self.family.tokenizer.decode(list(ids), False)

    @staticmethod
    def _name_contexts(text: str) -> set[tuple[str, str]]:
        """(before, after) around every place the family wrote the placeholder's name."""
        contexts = set()
        at = text.find(PLACEHOLDER)
        while at >= 0:
            before = text[max(0, at - _BEFORE) : at]
            # A line break starts the context: what is before it is the description or prose.
            before = before[before.rfind("\n") :] if "\n" in before else before
            end = at + len(PLACEHOLDER)
            contexts.add((before, text[end : end + 1]))
            at = text.find(PLACEHOLDER, end)
        return contexts

    def offered(self, prompt_ids: Sequence[int]) -> list[str]:
        """The known tool names the prompt declares or calls, in the order it first names them."""
        text = self._decode(prompt_ids)
        found: list[tuple[int, str]] = []
        for name in self.names:
            positions = [
                at
                for before, after in self.contexts
                if (at := text.find(before + name + after)) >= 0
            ]
            if positions:
                found.append((min(positions), name))
        return [name for _, name in sorted(found)]

    def turn_index(self, prompt_ids: Sequence[int]) -> int:
        """Tool-calling assistant turns since the last answer (``count_assistant_turns``).

        Each earlier assistant turn runs from the family's assistant header to its first stop
        token; the family's parser says whether it called tools. Messages back to back are one
        turn (Harmony writes reasoning, text and each call as messages of their own); a turn
        without calls starts the count again.
        """
        ids = list(prompt_ids)
        starts = sorted(
            {
                (i, i + len(marker))
                for marker in self.markers
                for i in range(len(ids) - len(marker) + 1)
                if ids[i] == marker[0] and ids[i : i + len(marker)] == marker
            }
        )
        # Finished assistant messages: (header start, text start, end token).
        messages = []
        for n, (head, begin) in enumerate(starts):
            limit = starts[n + 1][0] if n + 1 < len(starts) else len(ids)
            end = next((i for i in range(begin, limit) if ids[i] in self.ends), None)
            # None: the turn being sampled, or no assistant turn (DeepSeek: a user message
            # after tool results); a finished assistant message ends with an end token.
            if end is not None:
                messages.append((head, begin, end))
        # Messages back to back make one turn (Harmony writes reasoning, text and each call
        # as messages of their own).
        groups: list[list[tuple[int, int, int]]] = []
        for message in messages:
            if groups and message[0] == groups[-1][-1][2] + 1:
                groups[-1].append(message)
            else:
                groups.append([message])
        turns = 0
        for group in groups:
            first = group[0][0] if self.with_header else group[0][1]
            called = self.family.parse(ids[first : group[-1][2] + 1]).tool_calls
            turns = turns + 1 if called else 0
        return turns
