"""Mistral's chat format, rendered by Mistral's own library ``mistral-common``.

There is no Jinja template and no ``renderers`` renderer for Mistral: vLLM serves Mistral models
with ``--tokenizer-mode mistral``, which turns the OpenAI-style request into a mistral-common
``ChatCompletionRequest`` and lets ``encode_chat_completion`` write the token ids. This family
does the same, on the tekken tokenizer mistral-common ships (``tekken_240911.json``, tokenizer
version v3: the Mistral Nemo / Pixtral format; the only line breaks are the blank line
between the system prompt and the last user message)::

    <s>[INST]u1[/INST]a1</s>[AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS][INST]system

    u2[/INST][TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "abcDEF123"}]</s>
    [TOOL_RESULTS]{"content": ..., "call_id": "abcDEF123"}[/TOOL_RESULTS]

The system prompt and the tools are written before the *last* user message, so a new user message
moves them and re-renders the history: such a turn is not continued token-wise (the server
renders it). Tool results are appended after the answered turn's ``</s>``: an agent's tool cycle
is append-only and is continued exactly.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Sequence
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
)
from rollstream.models.hermes import ToolCall
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.models.vocab_json import tekken_file

#: The tokenizer version whose format this family describes (v7 moved the system prompt to
#: ``[SYSTEM_PROMPT]``, v11 writes calls as ``[TOOL_CALLS]name[ARGS]{...}``).
VERSION = "v3"
_CALL_ID = re.compile(r"[A-Za-z0-9]{9}")
_CALL_LIST = re.compile(r"\[{.*}\]", re.DOTALL)
_TOOL_CALLS = "[TOOL_CALLS]"


def mistral_call_id(call_id: str) -> str:
    """A harness's tool-call id as the nine alphanumerics Mistral's format requires.

    vLLM's Mistral path keeps an id's last nine characters (``truncate_tool_call_ids``), which
    suits ``chatcmpl-tool-<hex>``, ``call_<alnum>`` and ``toolu_<alnum>`` ids: that is what the
    server renders, so it is what this family renders. An id whose tail is not alphanumeric
    (vLLM would refuse the request) becomes a hash of the whole id, the same in the assistant's
    call and in the tool result that answers it.
    """
    if _CALL_ID.fullmatch(call_id):
        return call_id
    if len(call_id) > 9 and _CALL_ID.fullmatch(call_id[-9:]):
        return call_id[-9:]
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def mistral_messages(messages: Sequence[Message]) -> list[Message]:
    """OpenAI-style messages as this family gives them to mistral-common.

    Tool-call ids are mapped by :func:`mistral_call_id`. Reasoning echoed in history is left
    out: v3 has no reasoning (mistral-common refuses it), the model never writes any, and the
    other non-thinking families ignore it too. Claude Code's billing header stays: vLLM 0.32
    drops it in its chat-template path only, not in ``--tokenizer-mode mistral`` (held to vLLM's
    ``/tokenize`` in tests/models/test_parse_on_vllm.py).
    """
    out: list[Message] = []
    for message in messages:
        m = {k: v for k, v in message.items() if k not in ("reasoning", "reasoning_content")}
        if m.get("role") == "system" and any(o.get("role") != "system" for o in out):
            # mistral-common takes system messages first only (it joins those itself): a later
            # one (Claude Code's reminders) is a user turn, as for the other such families.
            m["role"] = "user"
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**call, "id": mistral_call_id(str(call["id"]))} if call.get("id") else call
                for call in m["tool_calls"]
            ]
        if m.get("role") == "tool" and m.get("tool_call_id"):
            m["tool_call_id"] = mistral_call_id(str(m["tool_call_id"]))
        out.append(m)
    return out


def _read_calls(raw: str, history: str) -> tuple[list[ToolCall], str | None]:
    """The calls of the JSON list after ``[TOOL_CALLS]``, as vLLM's pre-v11 parser reads it.

    The first JSON value is read (text after it is ignored, as vLLM does), or else the first
    ``[{...}]`` span. Returns the calls, or an error saying why there are none. ``history``:
    the prompt's text, where the ids already used in the conversation are.
    """
    try:
        value, _ = json.JSONDecoder().raw_decode(raw.strip())
    except ValueError:
        span = _CALL_LIST.search(raw)
        try:
            value = json.loads(span.group(0)) if span else None
        except ValueError:
            value = None
        if value is None:
            return [], "the text after [TOOL_CALLS] is not a JSON list"
    if not isinstance(value, list) or not value:
        return [], "[TOOL_CALLS] is not followed by a list of calls"
    calls: list[ToolCall] = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return [], f"a call without a name: {json.dumps(item)[:80]}"
        arguments = json.dumps(item.get("arguments", {}), ensure_ascii=False)
        call_id = _kept_id(item.get("id"), history, [call.id for call in calls])
        calls.append(ToolCall(item["name"], arguments, call_id))
    return calls, None


def _kept_id(sampled: object, history: str, taken: list[str]) -> str:
    """The id a parsed call gets: the one the model wrote if it is valid and new, else a new one.

    Keeping the model's id (vLLM draws a new one) makes the tool result name the call by the id
    in the model's own tokens, which exact context keeps. An id the conversation already holds
    would make the harness's ids ambiguous (Claude Code loops on a repeated one): a new one is
    drawn then, as vLLM does.
    """
    if (
        isinstance(sampled, str)
        and _CALL_ID.fullmatch(sampled)
        and f'"{sampled}"' not in history
        and sampled not in taken
    ):
        return sampled
    return uuid.uuid4().hex[:9]


class MistralFamily(Family, TaggedCalls):
    """Mistral's format through mistral-common, on the tekken vocabulary; see the module doc."""

    name = "mistral"

    def __init__(self, tokenizer: ChatTokenizer, tekken: Path | None = None) -> None:
        from mistral_common.protocol.instruct.normalize import get_normalizer
        from mistral_common.protocol.instruct.validator import ValidationMode, get_validator
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

        self.tokenizer = tokenizer
        path = tekken or tekken_file()
        # Test mode, as vLLM loads it: prompts end with a user or tool message.
        self._serving: Any = MistralTokenizer.from_file(str(path), mode=ValidationMode.test)
        instruct: Any = self._serving.instruct_tokenizer
        tekkenizer: Any = instruct.tokenizer
        self.version = str(tekkenizer.version.value)
        if self.version != VERSION:
            raise ConfigurationError(
                f"{path} is tokenizer version {self.version}; the mistral family describes "
                f"{VERSION}'s format only"
            )
        # The same encoder without the rule on the last message: renders ending with an answer.
        self._answers: Any = MistralTokenizer(
            instruct,
            validator=get_validator(tekkenizer.version, mode=ValidationMode.agnostic),
            request_normalizer=get_normalizer(
                tekkenizer.version, tekkenizer.model_settings_builder
            ),
        )
        self._eos = int(tekkenizer.eos_id)
        self._call_token = int(tekkenizer.get_special_token(_TOOL_CALLS))
        self._fits(tekkenizer, path)

    def _fits(self, tekkenizer: Any, path: Path) -> None:
        """Refuse a tokenizer folder whose ids are not mistral-common's (decode would lie)."""
        # Tekkenizer.encode reads no special tokens out of text: plain text is compared whole,
        # the format's special tokens one by one.
        plain = 'Écris « bonjour » 世界 ✨ {"a": [1, 2]}\n\tdef f(): pass'
        fits = (
            self.tokenizer.vocab_size == int(tekkenizer.n_words)
            and self.tokenizer.encode(plain)
            == [int(t) for t in tekkenizer.encode(plain, bos=False, eos=False)]
            and all(
                self.tokenizer.special_id(token) == int(tekkenizer.get_special_token(token))
                for token in ("<s>", "</s>", "[INST]", "[/INST]", _TOOL_CALLS, "[TOOL_RESULTS]")
            )
        )
        if not fits:
            raise ConfigurationError(
                f"the tokenizer in {self.tokenizer.path} does not fit the mistral family "
                f"(its ids differ from those of mistral-common's {path.name})"
            )

    @property
    def stop_ids(self) -> frozenset[int]:
        """``</s>``, which ends every assistant turn (tool calls included)."""
        return frozenset({self._eos}) | self.tokenizer.stop_ids

    @property
    def end_of_turn_id(self) -> int:
        """``</s>``."""
        return self._eos

    def render_ids(
        self,
        messages: Sequence[Message],
        tools: list[Any] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """mistral-common's ids for the conversation (BOS included), as vLLM renders it.

        The format has no generation prompt: the model answers right after ``[/INST]`` or
        ``[/TOOL_RESULTS]``. A conversation ending with an answer renders it (``</s>`` closed)
        when ``add_generation_prompt`` is false; mistral-common refuses it otherwise, as vLLM
        does. mistral-common's errors (an answer with both text and calls, reasoning, which v3
        cannot write) are raised as they are: the server would refuse the request too.
        """
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        answered = bool(messages) and messages[-1].get("role") == "assistant"
        encoder = self._answers if answered and not add_generation_prompt else self._serving
        request = ChatCompletionRequest.from_openai(mistral_messages(messages), tools or None)
        return [int(t) for t in encoder.encode_chat_completion(request).tokens]

    def completion_ids(self, messages: Sequence[Message], answer: Message, tools: Any) -> list[int]:
        """What mistral-common writes for ``answer`` after the prompt, to its ``</s>``.

        Calls are ``[TOOL_CALLS]`` and a JSON list of ``{"name", "arguments", "id"}``. A v3 call
        turn has no text (mistral-common refuses an answer with both, and so does vLLM when a
        harness sends one back): the text of an answer with calls is not written, as a model
        trained on this format answers with its calls alone.
        """
        if answer.get("tool_calls") and answer.get("content"):
            answer = {**answer, "content": None}
        prompt = self.render_ids(messages, tools)
        full = self.render_ids([*messages, answer], tools, add_generation_prompt=False)
        if full[: len(prompt)] != prompt:
            raise ContinuationError("mistral-common re-renders the history when an answer follows")
        ids = full[len(prompt) :]
        if self._eos in ids:
            return ids[: ids.index(self._eos) + 1]
        return [*ids, self._eos]

    def parse(
        self, completion_ids: Sequence[int], prompt_ids: Sequence[int] = (), tools: Any = None
    ) -> ParsedTurn:
        """Content, then the JSON list of calls after ``[TOOL_CALLS]`` (vLLM's ``mistral``).

        A list that cannot be read leaves the whole text as content, ``[TOOL_CALLS]`` included,
        with ``parse_error`` set. There is no reasoning in this format.
        """
        ids = list(completion_ids)
        while ids and ids[-1] in self.stop_ids:
            ids.pop()
        if self._call_token not in ids:
            return ParsedTurn(self.tokenizer.decode(ids) or None)
        at = ids.index(self._call_token)
        calls: list[ToolCall] = []
        error: str | None
        if self._call_token in ids[at + 1 :]:
            error = "more than one [TOOL_CALLS] (v3 writes all calls in one list)"
        else:
            history = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
            calls, error = _read_calls(self.tokenizer.decode(ids[at + 1 :], False), history)
        if error is not None:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            return ParsedTurn(text or None, parse_error=f"tool call not parsed: {error}")
        return ParsedTurn(self.tokenizer.decode(ids[:at]) or None, None, calls)

    def call_started(self, completion_ids: Sequence[int]) -> bool:
        """Whether ``[TOOL_CALLS]`` was sampled."""
        return self._call_token in completion_ids

    def continue_turn(self, turn: AnsweredTurn, new: Sequence[Message]) -> Continuation:
        """The sampled turn, then what mistral-common writes after the answered turn's ``</s>``.

        Sound only when the history before the answered turn, and the answered turn itself,
        render the same once ``new`` is added: true for tool results, false for a new user
        message when there is a system prompt or tools (they move to the new last user message).
        """
        from mistral_common.exceptions import MistralCommonException

        history, tools = list(turn.messages), turn.tools
        try:
            prompt = self.render_ids(history, tools)
            before = self.render_ids([*history, turn.answer], tools, add_generation_prompt=False)
            full = self.render_ids([*history, turn.answer, *new], tools)
        except (MistralCommonException, ValueError, AssertionError) as exc:
            # ValueError includes pydantic's: a message mistral-common cannot take.
            raise ContinuationError(
                f"mistral-common cannot render the continued conversation: {exc}"
            ) from exc
        if before[: len(prompt)] != prompt or full[: len(prompt)] != prompt:
            if any(m.get("role") == "user" for m in new):
                raise ContinuationError(
                    f"a new user message takes the system prompt and the tools from the earlier "
                    f"one (mistral-common's {self.version} format writes them before the last "
                    "user message), so the history re-renders (not append-only): the server "
                    "renders this prompt"
                )
            raise ContinuationError(
                "the history before the answered turn renders differently once messages "
                "follow it (not append-only): the server renders this prompt"
            )
        if full[len(prompt) : len(before)] != before[len(prompt) :]:
            raise ContinuationError("the answered turn renders differently once messages follow it")
        appended = not turn.completion_ids or turn.completion_ids[-1] not in self.stop_ids
        head = [*turn.prompt_ids, *turn.completion_ids, *([self._eos] if appended else [])]
        return Continuation(head + full[len(before) :], appended)

    def check(self) -> Verdict:
        """The renderer families' self-check: calls read back, a tool turn continues."""
        from rollstream.models.probe import probe_continuation

        return probe_continuation(self)


def load_mistral_family(folder: Path) -> MistralFamily:
    """The mistral family on the tokenizer folder ``folder`` (the ``mistral-tekken`` build)."""
    return MistralFamily(ChatTokenizer(folder, require_template=False))
