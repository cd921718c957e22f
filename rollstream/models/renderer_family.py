"""Families built on the ``renderers`` library: one hand-written renderer and parser per family.

``renderers`` renders messages to token ids without Jinja, parses sampled ids back into content,
reasoning and tool calls by the family's special tokens, and continues a sampled turn without
re-rendering it (``bridge_to_next_turn``). rollstream adds the tokenizer folder, the stop ids
the server uses, and the shape of a Chat Completions answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rollstream.errors import ConfigurationError
from rollstream.models.family import (
    AnsweredTurn,
    Continuation,
    ContinuationError,
    Family,
    Message,
    ParsedTurn,
    TaggedCalls,
    Verdict,
    arguments_json,
)
from rollstream.models.family_spec import FamilySpec
from rollstream.models.hermes import ToolCall
from rollstream.models.renderer_text import chat_messages, verbatim_text
from rollstream.models.tokenizer import ChatTokenizer

log = logging.getLogger(__name__)

#: Renderer settings that keep every turn's reasoning (where a renderer has them).
_KEEP_REASONING: dict[str, Any] = {
    "auto_drop_analysis": False,
    "clear_thinking": False,
    "preserve_thinking": True,
    "truncate_history_thinking": False,
}


class RendererFamily(Family, TaggedCalls):
    """A model family served through its ``renderers`` renderer."""

    def __init__(self, name: str, spec: FamilySpec, tokenizer: ChatTokenizer) -> None:
        from renderers import config_from_name

        renderer_name, thinks = spec.renderer, spec.thinks
        self.spec = spec
        self._single_system = spec.single_system
        self.name = name
        self.tokenizer = tokenizer
        base = config_from_name(renderer_name)
        if base is None:
            raise ConfigurationError(f"renderers has no renderer named {renderer_name!r}")
        config = dict(spec.config)
        if getattr(base, "enable_thinking", False) is None and "enable_thinking" not in config:
            # The renderer would look the default up by Hugging Face repo name, which a model
            # folder never matches (Qwen3.5's small sizes default to thinking off): the
            # folder's own template, where there is one, says.
            opened = template_opens_reasoning(tokenizer)
            if opened is not None:
                config["enable_thinking"] = thinks = opened
        self._config = base.model_copy(update=config)
        # Harmony writes the conversation's date into the system message; vLLM dates each
        # request, renderers dates the renderer when it is made (a family made before midnight
        # would render yesterday's after it).
        self._dated = "conversation_start_date" in type(base).model_fields and not config.get(
            "conversation_start_date"
        )
        self._date = ""
        self._make_renderers(today() if self._dated else "")
        self.renderer_name = renderer_name
        self._thinks = thinks
        stops = [int(t) for t in self.renderer.get_stop_token_ids()]
        self._end_of_turn = stops[0]
        self._stop_ids = frozenset(stops) | tokenizer.generation_stop_ids
        self._call_ids = frozenset(self._special_ids(spec.call_opens, "tool-call"))
        self._header = self._special_ids(spec.header, "header")

    def _special_ids(self, tokens: Sequence[str], what: str) -> list[int]:
        """The ids of the format's ``tokens``; a vocabulary without one is another family's."""
        ids = [self.tokenizer.special_id(token) for token in tokens]
        missing = [t for t, i in zip(tokens, ids, strict=True) if i is None]
        if missing:
            raise ConfigurationError(f"the {self.name} vocabulary lacks the {what} token {missing}")
        return [i for i in ids if i is not None]

    def _make_renderers(self, date: str) -> None:
        from renderers import create_renderer

        config = self._config.model_copy(update={"conversation_start_date": date} if date else {})
        # Writing a sampled answer needs its reasoning kept in the render, which some
        # templates drop from the last turn (harmony's analysis before a final message).
        fields = type(config).model_fields
        keeping = {k: v for k, v in _KEEP_REASONING.items() if k in fields}
        try:
            self.renderer: Any = create_renderer(self.tokenizer.hf, config)
            self._writer: Any = (
                create_renderer(self.tokenizer.hf, config.model_copy(update=keeping))
                if keeping
                else self.renderer
            )
        except (AssertionError, KeyError, ValueError) as exc:
            # A renderer asserts that its special tokens exist: another family's vocabulary.
            raise ConfigurationError(
                f"the tokenizer in {self.tokenizer.path} does not fit the {self.name} family: {exc}"
            ) from exc
        self._date = date

    def _today(self) -> Any:
        """The renderer, dated today where the format writes a date (see ``_dated``)."""
        if self._dated and self._date != today():
            self._make_renderers(today())
        return self.renderer

    @property
    def stop_ids(self) -> frozenset[int]:
        """The renderer's stop ids and the model's generation config's end-of-sequence ids."""
        return self._stop_ids

    @property
    def end_of_turn_id(self) -> int:
        """The token that closes an assistant turn (the renderer's first stop id)."""
        return self._end_of_turn

    @property
    def thinks(self) -> bool:
        """Whether the model writes reasoning first (thinking on)."""
        return self._thinks

    def render_ids(
        self,
        messages: Sequence[Message],
        tools: list[Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """The prompt ids, as the family's renderer renders them."""
        ids: list[int] = self._today().render_ids(
            chat_messages(messages, self._single_system),
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
        )
        return self._header_left_open(ids) if add_generation_prompt else ids

    def completion_ids(self, messages: Sequence[Message], answer: Message, tools: Any) -> list[int]:
        """What the renderer writes for ``answer`` after the generation prompt, to its first stop.

        Harmony's channel headers and a reasoning opener are sampled too, so this is the render
        past the prompt, not only the tokens the renderer attributes to the answer's body.
        """
        prompt = self.render_ids(messages, tools, add_generation_prompt=True)
        self._today()
        rendered = self._writer.render(
            chat_messages([*messages, answer], self._single_system), tools=tools or None
        )
        full = [int(t) for t in rendered.token_ids]
        if full[: len(prompt)] == prompt:
            ids = full[len(prompt) :]
        else:  # the template renders the last turn apart from its prompt: its sampled tokens
            last = len(messages)
            marks = zip(full, rendered.message_indices, rendered.sampled_mask, strict=True)
            ids = [t for t, index, sampled in marks if index == last and sampled]
        cut = next((i for i, t in enumerate(ids) if t in self._stop_ids), None)
        if cut is not None:
            return ids[: cut + 1]
        return [*ids, self._end_of_turn]

    def parse(
        self, completion_ids: Sequence[int], prompt_ids: Sequence[int] = (), tools: Any = None
    ) -> ParsedTurn:
        """Content, reasoning and tool calls; a malformed call leaves the text as content."""
        open_header = self._open_header(completion_ids, prompt_ids)
        parsed = self.renderer.parse_response(
            [*open_header, *completion_ids], prompt_ids=list(prompt_ids), tools=tools or None
        )
        calls: list[ToolCall] = []
        failed: list[str] = []
        for call in parsed.tool_calls:
            # XML formats report an argument they kept as a string (no schema) as invalid
            # JSON; vLLM's parsers keep such values as strings too.
            if not call.name or not (str(call.status) == "ok" or isinstance(call.arguments, dict)):
                failed.append(f"{call.status}: {call.raw[:80]!r}")
                continue
            native = {"id": call.id} if call.id else {}  # Kimi's ids name the function
            calls.append(ToolCall(call.name, arguments_json(call.arguments), **native))
        content = parsed.content or None
        reasoning = (parsed.reasoning_content or "").strip() or None
        if failed:
            # As vLLM does: what the parser could not read reaches the harness as text, as the
            # model wrote it (after its reasoning).
            content = self._text_after_reasoning(completion_ids, reasoning) or None
        if self.spec.verbatim:
            # renderers strips the text around reasoning and calls; vLLM's parsers for most
            # families do too, this family's keep it.
            text = self.tokenizer.decode(self._without_stops(completion_ids), False)
            content, reasoning = verbatim_text(text, content, reasoning, bool(calls))
        if failed:
            return ParsedTurn(
                content, reasoning, [], parse_error="tool call not parsed: " + "; ".join(failed)
            )
        return ParsedTurn(content, reasoning, calls)

    def _header_left_open(self, ids: list[int]) -> list[int]:
        """A generation prompt ending where vLLM's and the published template's do (``header``).

        renderers' harmony prompt goes on to ``<|channel|>analysis<|message|>``, which gpt-oss
        writes itself after ``<|start|>assistant``; left in, every prompt would differ from the
        server's from its last header on. Cut at the first special token after the role.
        """
        if not self._header or not ids or ids[-1] != self._header[1]:
            return ids
        opening = self._header[0]
        start = len(ids) - 1 - ids[::-1].index(opening) if opening in ids else len(ids)
        added = self.tokenizer.hf.added_tokens_decoder  # the format's tokens, <|channel|> too
        cut = next((i for i in range(start + 1, len(ids)) if ids[i] in added), len(ids))
        return ids[:cut]

    def _open_header(self, completion_ids: Sequence[int], prompt_ids: Sequence[int]) -> list[int]:
        """The part of the turn's header the prompt opened and left open, or [] (see header)."""
        if not self._header or not prompt_ids:
            return []
        opening, closing = self._header
        if completion_ids and completion_ids[0] == opening:
            return []
        prompt = list(prompt_ids)
        if opening not in prompt:
            return []
        tail = prompt[len(prompt) - 1 - prompt[::-1].index(opening) :]
        return [] if closing in tail else tail

    def _without_stops(self, completion_ids: Sequence[int]) -> list[int]:
        ids = list(completion_ids)
        while ids and ids[-1] in self._stop_ids:
            ids.pop()
        return ids

    def _text_after_reasoning(self, completion_ids: Sequence[int], reasoning: str | None) -> str:
        text = self.tokenizer.decode(self._without_stops(completion_ids), skip_special_tokens=False)
        close = self.spec.reasoning_close
        if close and close in text:
            return text.split(close, 1)[1].strip()
        # Reasoning never closed (a call written inside it): the text is what follows the
        # reasoning the parser kept, not the reasoning a second time.
        if reasoning and reasoning in text:
            text = text.split(reasoning, 1)[1]
        return text.strip()

    def call_started(self, completion_ids: Sequence[int]) -> bool:
        """Whether one of the family's tool-call openers was sampled.

        Always true for formats without one: their calls are plain text from the start. For a
        family that also writes a call as a bare JSON object (``json_calls``), a turn whose text
        opens with ``{`` may be one.
        """
        if not self._call_ids:
            return True
        if any(t in self._call_ids for t in completion_ids):
            return True
        if self.spec.json_calls and completion_ids:
            # A few tokens are enough to see the turn's first character past any whitespace.
            return self.tokenizer.decode(list(completion_ids[:8])).lstrip().startswith("{")
        return False

    def continue_turn(self, turn: AnsweredTurn, new: Sequence[Message]) -> Continuation:
        """The renderer's bridge: the sampled turn kept, new messages in the family's framing."""
        head = [*turn.prompt_ids, *turn.completion_ids]
        bridged = self._today().bridge_to_next_turn(
            list(turn.prompt_ids),
            list(turn.completion_ids),
            chat_messages(new, self._single_system, after_start=True),
            tools=turn.tools or None,
        )
        if bridged is None:
            raise ContinuationError(
                f"the {self.name} renderer does not continue this turn "
                "(it would re-render history here, e.g. reasoning dropped at a new user turn)"
            )
        ids = self._header_left_open([int(t) for t in getattr(bridged, "token_ids", bridged)])
        if ids[: len(head)] != head:
            raise ContinuationError(f"the {self.name} renderer's continuation changed the turn")
        appended = not turn.completion_ids or turn.completion_ids[-1] not in self._stop_ids
        return Continuation(ids, appended)

    def call_id(self, name: str, index: int) -> str:
        """A tool-call id as the family's server writes them (Kimi: ``functions.NAME:INDEX``)."""
        if self.spec.call_id_format:
            return self.spec.call_id_format.format(name=name, index=index)
        return super().call_id(name, index)

    def check(self) -> Verdict:
        """Continue a sampled tool turn and a sampled answer; both must keep the sampled tokens."""
        from rollstream.models.probe import probe_continuation

        return probe_continuation(self)


def today() -> str:
    """Today's date as vLLM dates a harmony conversation (the server's local time)."""
    return datetime.now().strftime("%Y-%m-%d")


def template_opens_reasoning(tokenizer: ChatTokenizer) -> bool | None:
    """Whether the folder's own template opens reasoning at the generation prompt by default.

    True when the prompt ends in an open ``<think>``, False when in an empty closed block (the
    model is told not to think), None without a template or when it does neither.
    """
    if not getattr(tokenizer.hf, "chat_template", None):
        return None
    try:
        prompt = tokenizer.render([{"role": "user", "content": "hi"}]).rstrip()
    except Exception:  # a template that cannot render one user message says nothing here
        return None
    if prompt.endswith("<think>"):
        return True
    if prompt.endswith("</think>"):
        return False
    return None


def load_renderer_family(name: str, spec: FamilySpec, folder: Path) -> RendererFamily:
    """The family ``name`` (built as ``spec`` says) on the tokenizer folder ``folder``."""
    return RendererFamily(name, spec, ChatTokenizer(folder, require_template=False))
