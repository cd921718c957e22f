"""A model family: how one served model turns messages into tokens and its tokens into messages.

Every part that needs to know the served model goes through a :class:`Family`: the reference
backend renders prompts and parses answers with it, the interceptor's exact-context mode
continues a sampled turn with it, reconstruction's ``retokenize`` renders whole conversations.
Two kinds exist: families built on the ``renderers`` library (hand-written, deterministic
renderers and parsers per model family, the ones prime-rl and verifiers train with) and the
generic family (any Hugging Face tokenizer folder with its own Jinja template).
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rollstream.errors import ConfigurationError
from rollstream.models.hermes import ToolCall
from rollstream.models.tokenizer import ChatTokenizer

log = logging.getLogger(__name__)

Message = dict[str, Any]


class ContinuationError(ConfigurationError):
    """A sampled turn cannot be continued token-wise (exact context falls back or is refused)."""


@dataclass(frozen=True)
class ParsedTurn:
    """What a completion says: content, reasoning and tool calls, as a server's parsers split it.

    ``parse_error`` is set when the family's tool-call parser could not parse what the model
    wrote: the text then stays content (as vLLM returns it), nothing is lost.
    """

    content: str | None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_error: str | None = None

    def message(self) -> Message:
        """The Chat Completions ``message`` (reasoning under both names vLLM has used)."""
        out: Message = {"role": "assistant", "content": self.content}
        if self.reasoning:
            out |= reasoning_fields(self.reasoning)
        if self.tool_calls:
            out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return out


@dataclass(frozen=True)
class AnsweredTurn:
    """A turn the model answered: its conversation, tools, answer and the tokens on both sides."""

    messages: Sequence[Message]
    tools: list[Any] | None
    answer: Message
    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]


@dataclass(frozen=True)
class Continuation:
    """The next prompt's ids after a sampled turn, and whether an end-of-turn had to be added."""

    prompt_ids: list[int]
    appended_end_of_turn: bool


@dataclass(frozen=True)
class Verdict:
    """Whether a family can continue a sampled turn token-wise; ``reason`` says why not."""

    ok: bool
    reason: str = ""


class Family(ABC):
    """One served model's rendering and parsing; see the module docstring."""

    #: The family's name (``qwen3``, ``llama-3``, ``generic``...).
    name: str
    #: Its tokenizer (encoding, decoding, token texts).
    tokenizer: ChatTokenizer

    @property
    @abstractmethod
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end a generation (end of turn, end of text, tool-call ends)."""

    @property
    @abstractmethod
    def end_of_turn_id(self) -> int:
        """The token that closes an assistant turn (added after a turn cut by length)."""

    @property
    def thinks(self) -> bool:
        """Whether the model writes reasoning before its answer by default."""
        return False

    @abstractmethod
    def render_ids(
        self,
        messages: Sequence[Message],
        tools: list[Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """A conversation's prompt ids, as the served model's template renders it."""

    @abstractmethod
    def completion_ids(self, messages: Sequence[Message], answer: Message, tools: Any) -> list[int]:
        """The ids the model samples to write ``answer`` after ``messages``, end-of-turn included.

        What the template renders for the answer, written in the family's native format
        (reasoning, tool-call syntax); the scripted policy samples these.
        """

    @abstractmethod
    def parse(
        self, completion_ids: Sequence[int], prompt_ids: Sequence[int] = (), tools: Any = None
    ) -> ParsedTurn:
        """Split a completion into content, reasoning and tool calls.

        ``prompt_ids``: reasoning opened by the generation prompt counts; ``tools``: the
        request's tools (XML formats read argument types from them).
        """

    @abstractmethod
    def continue_turn(self, turn: AnsweredTurn, new: Sequence[Message]) -> Continuation:
        """The prompt that follows ``turn``'s sampled tokens with ``new`` messages.

        Starts with the turn's prompt and completion ids exactly; raises ContinuationError when
        that cannot be done soundly (the caller lets the server render instead).
        """

    def call_id(self, name: str, index: int) -> str:
        """A tool-call id for call ``index`` of a turn (nine alphanumerics, as Mistral's need)."""
        return f"call{index:05d}"

    @abstractmethod
    def check(self) -> Verdict:
        """Whether :meth:`continue_turn` can be used at all with this model."""

    def stream_parser(self, prompt_ids: Sequence[int] = (), tools: Any = None) -> StreamParser:
        """A parser of one streamed completion."""
        return StreamParser(self, prompt_ids, tools)


@dataclass
class StreamDelta:
    """What one step of a streamed parse produced."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)


class StreamParser:
    """A family's whole-completion parser applied to a growing completion.

    Parses the tokens so far now and then (every time they have grown by a quarter, at least 16
    tokens): reasoning and content go out as they grow; content is held once a tool call may
    have begun, and tool calls go out whole at the end, from the final parse. A format without
    an atomic tool-call marker holds content to the end.
    """

    def __init__(self, family: Family, prompt_ids: Sequence[int], tools: Any = None) -> None:
        self._family = family
        self._tools = tools
        self._prompt = list(prompt_ids)
        self._ids: list[int] = []
        self._parsed_at = 0
        self._content = ""
        self._reasoning = ""
        self.final: ParsedTurn | None = None

    def feed(self, token_ids: Sequence[int]) -> StreamDelta:
        """Take the next sampled ids; returns what can be sent now."""
        self._ids.extend(token_ids)
        if len(self._ids) - self._parsed_at < max(16, self._parsed_at // 4):
            return StreamDelta()
        self._parsed_at = len(self._ids)
        parsed = self._family.parse(self._ids, self._prompt, self._tools)
        return self._advance(parsed, final=False)

    def finish(self) -> StreamDelta:
        """The end of the completion: the rest, tool calls included."""
        self.final = self._family.parse(self._ids, self._prompt, self._tools)
        delta = self._advance(self.final, final=True)
        delta.tool_calls = [
            part
            for index, call in enumerate(self.final.tool_calls)
            for part in (
                {
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                },
                {"index": index, "function": {"arguments": call.arguments}},
            )
        ]
        return delta

    def _advance(self, parsed: ParsedTurn, final: bool) -> StreamDelta:
        delta = StreamDelta()
        reasoning = parsed.reasoning or ""
        if reasoning.startswith(self._reasoning):
            delta.reasoning, self._reasoning = reasoning[len(self._reasoning) :], reasoning
        content = parsed.content or ""
        may_call = isinstance(self._family, TaggedCalls) and self._family.call_started(self._ids)
        if (
            final or (isinstance(self._family, TaggedCalls) and not may_call)
        ) and content.startswith(self._content):
            delta.content, self._content = content[len(self._content) :], content
        elif final and self._content:
            # Sent text cannot be taken back: the harness keeps it, and the rest is not sent.
            log.warning(
                "the %s family's final parse does not continue the %d characters of content "
                "already streamed; its final content (%d characters) is not sent",
                self._family.name,
                len(self._content),
                len(content),
            )
        return delta


class TaggedCalls(ABC):
    """A family whose tool calls begin with a special token (so content before it is final)."""

    @abstractmethod
    def call_started(self, completion_ids: Sequence[int]) -> bool:
        """Whether a tool call has begun in these ids."""


def reasoning_fields(text: str) -> dict[str, str]:
    """A Chat message's reasoning, under both names.

    vLLM wrote and read ``reasoning_content``, and from 0.20 reads only ``reasoning`` for
    history; a server ignores the name it does not use.
    """
    return {"reasoning_content": text, "reasoning": text}


def arguments_json(arguments: Any) -> str:
    """Tool-call arguments as the JSON string Chat Completions carries."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)
