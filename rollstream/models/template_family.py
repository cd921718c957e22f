"""The generic family: any Hugging Face tokenizer folder, its own Jinja template, hermes tool calls.

A sampled turn is continued by rendering the conversation twice, with and without the new
messages, and taking what the template writes after the answered turn's end-of-turn token.
That is sound when what follows an assistant turn does not depend on what the assistant said;
:meth:`TemplateFamily.check` verifies it (and that hermes reads the template's tool calls back)
before exact context uses the family.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from rollstream.models.family import (
    AnsweredTurn,
    Continuation,
    ContinuationError,
    Family,
    Message,
    ParsedTurn,
    TaggedCalls,
    Verdict,
)
from rollstream.models.hermes import parse_tool_calls
from rollstream.models.tokenizer import ChatTokenizer

_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)
_REWRITES = (
    "the chat template re-renders earlier turns when messages are added "
    "(not append-only): the prompt cannot be continued token-wise"
)


class TemplateFamily(Family, TaggedCalls):
    """A tokenizer folder's own chat template, hermes tool calls, ``<think>`` reasoning."""

    name = "generic"

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, folder: Path) -> TemplateFamily:
        """The generic family of a tokenizer folder (it must have a chat template)."""
        return cls(ChatTokenizer(folder))

    @cached_property
    def end_of_turn_id(self) -> int:
        """The first special token the template writes after an assistant turn's content.

        Read from the template, not from ``eos_token``: Kimi's EOS is ``[EOS]`` while its turns
        end with ``<|im_end|>``, and a base model's EOS is end-of-text.
        """
        content = "Here they are."
        text = self.tokenizer.render(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}],
            None,
            add_generation_prompt=False,
        )
        at = text.rfind(content)
        if at >= 0:
            for tid in self.tokenizer.encode(text[at + len(content) :]):
                if tid in self.tokenizer.special_ids:
                    return tid
        return self.tokenizer.eos_id

    @cached_property
    def stop_ids(self) -> frozenset[int]:
        """The tokenizer's stop ids and the template's end of turn."""
        return self.tokenizer.stop_ids | {self.end_of_turn_id}

    @property
    def end_of_turn(self) -> str:
        """The end-of-turn token's text."""
        return self.tokenizer.token_text(self.end_of_turn_id)

    def render_ids(
        self,
        messages: Sequence[Message],
        tools: list[Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """The template's text, tokenized."""
        return self.tokenizer.encode(
            self.tokenizer.render(list(messages), tools, add_generation_prompt)
        )

    def completion_text(self, messages: Sequence[Message], answer: Message, tools: Any) -> str:
        """What the template writes for ``answer`` after the generation prompt.

        The end-of-turn token included.
        """
        prompt = self.tokenizer.render(list(messages), tools, add_generation_prompt=True)
        full = self.tokenizer.render([*messages, answer], tools, add_generation_prompt=False)
        if not full.startswith(prompt):
            raise ContinuationError(_REWRITES)
        text = full[len(prompt) :]
        cut = text.find(self.end_of_turn)
        return text if cut < 0 else text[: cut + len(self.end_of_turn)]

    def completion_ids(self, messages: Sequence[Message], answer: Message, tools: Any) -> list[int]:
        """The answer's text as the template writes it, tokenized."""
        ids = self.tokenizer.encode(self.completion_text(messages, answer, tools))
        if not ids or ids[-1] not in self.stop_ids:
            ids.append(self.end_of_turn_id)
        return ids

    def parse(
        self, completion_ids: Sequence[int], prompt_ids: Sequence[int] = (), tools: Any = None
    ) -> ParsedTurn:
        """``<think>`` reasoning, then hermes tool calls, as vLLM's parsers split them."""
        ids = list(completion_ids)
        while ids and ids[-1] in self.stop_ids:
            ids.pop()
        text = self.tokenizer.decode(ids)
        reasoning = None
        opened = self.tokenizer.decode(list(prompt_ids[-4:]), False).rstrip().endswith("<think>")
        if opened and "</think>" in text:
            reasoning, text = text.split("</think>", 1)
            text = text.lstrip()
        elif (match := _THINK.match(text)) is not None:
            reasoning, text = match.group(1), text[match.end() :]
        parsed = parse_tool_calls(text)
        error = None
        if not parsed.tool_calls and "<tool_call>" in text:
            error = "tool call not parsed (hermes)"
        reasoning = reasoning.strip() if reasoning else None
        return ParsedTurn(parsed.content, reasoning, parsed.tool_calls, error)

    def call_started(self, completion_ids: Sequence[int]) -> bool:
        """Whether ``<tool_call>`` was sampled (always, where it is not one token)."""
        tag = self.tokenizer.special_id("<tool_call>")
        return tag is None or tag in completion_ids

    def continuation_text(self, turn: AnsweredTurn, new: Sequence[Message]) -> str:
        """What the template renders after ``turn``'s end-of-turn for ``new`` messages.

        Includes the generation prompt of the next assistant turn. The answered turn need not
        render the same in history (Qwen3 drops an empty ``<think>`` block there); what follows
        its end-of-turn must.
        """
        history, tools = list(turn.messages), turn.tools
        before = self.tokenizer.render([*history, turn.answer], tools, add_generation_prompt=False)
        full = self.tokenizer.render(
            [*history, turn.answer, *new], tools, add_generation_prompt=True
        )
        eot = self.end_of_turn
        turns = before.count(eot)
        if turns == 0:
            raise ContinuationError(f"the assistant turn does not end with {eot!r}")
        ends = [-len(eot)]
        for _ in range(turns):
            ends.append(full.find(eot, ends[-1] + len(eot)))
            if ends[-1] < 0:
                raise ContinuationError(_REWRITES)
        # The turns before the answered one must render the same; the answered turn itself
        # may not (its sampled tokens are kept whatever the template writes for it).
        earlier = before.rfind(eot, 0, before.rfind(eot))
        kept = before[: earlier + len(eot)] if earlier >= 0 else ""
        if kept != full[: ends[-2] + len(eot)]:
            raise ContinuationError(_REWRITES)
        at = ends[-1]
        tail = before[before.rfind(eot) + len(eot) :]
        rest = full[at + len(eot) :]
        if not rest.startswith(tail):
            raise ContinuationError(
                "what the template writes after the answered turn changes when messages are added"
            )
        return rest

    def continue_turn(self, turn: AnsweredTurn, new: Sequence[Message]) -> Continuation:
        """The turn's ids, its end-of-turn if it was cut, then the continuation text's ids."""
        text = self.continuation_text(turn, new)
        appended = not turn.completion_ids or turn.completion_ids[-1] not in self.stop_ids
        head = [*turn.prompt_ids, *turn.completion_ids]
        if appended:
            head.append(self.end_of_turn_id)
        return Continuation(head + self.tokenizer.encode(text), appended)

    def check(self) -> Verdict:
        """The template's own verdict (see :mod:`rollstream.models.probe`)."""
        from rollstream.models.probe import probe_template

        return probe_template(self)
