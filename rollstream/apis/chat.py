"""Chat Completions on the way upstream: ask for token ids and logprobs, and take them back out.

The harness never sees fields it did not ask for: a capture field is removed from the answer
unless the harness's own request asked for it. What the upstream returned is accumulated for
the CallRecord, from a whole response or chunk by chunk.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from rollstream.apis.errors import TranslationError

BackendKind = Literal["vllm", "sglang"]
JSON = dict[str, Any]


@dataclass(frozen=True)
class CaptureOptions:
    """What to ask the upstream for."""

    backend: BackendKind = "vllm"
    top_logprobs: int = 0
    upstream_model: str | None = None  # None: keep the harness's model name


@dataclass(frozen=True)
class Asked:
    """Which capture fields the harness asked for itself (they stay in its answer)."""

    token_ids: bool = False
    logprobs: bool = False
    usage_in_stream: bool = False


def prepare_chat_request(body: JSON, options: CaptureOptions) -> tuple[JSON, Asked]:
    """The upstream request: capture fields added, the model rewritten; and what was asked."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise TranslationError("a Chat Completions request needs a 'messages' list", "messages")
    asked = Asked(
        token_ids=bool(body.get("return_token_ids")),
        logprobs=bool(body.get("logprobs")),
        usage_in_stream=bool((body.get("stream_options") or {}).get("include_usage")),
    )
    upstream = copy.copy(body)
    if options.upstream_model:
        upstream["model"] = options.upstream_model
    if options.backend == "vllm":
        upstream["return_token_ids"] = True
    else:  # SGLang names them differently and reports them in meta_info
        upstream["return_prompt_token_ids"] = True
        upstream["return_meta_info"] = True
    upstream["logprobs"] = True
    upstream["top_logprobs"] = max(options.top_logprobs, int(body.get("top_logprobs") or 0))
    if upstream.get("stream"):
        # The usage chunk carries the token counts even where ids are missing.
        upstream["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return upstream, asked


def strip_response(response: JSON, asked: Asked, harness_model: str | None) -> JSON:
    """A whole Chat Completions answer as the harness expects it (``response`` is kept)."""
    out = dict(response)
    out["choices"] = [dict(choice) for choice in out.get("choices") or []]
    return _strip(out, asked, harness_model)


def strip_chunk(chunk: JSON, asked: Asked, harness_model: str | None) -> JSON | None:
    """A stream chunk as the harness expects it; None when the whole chunk is ours (usage).

    The chunk is changed in place, not copied: it is the stream parser's own, and nothing
    reads it after this (copying it cost a tenth of a streamed call's own work).
    """
    if not chunk.get("choices") and "usage" in chunk and not asked.usage_in_stream:
        return None
    if not isinstance(chunk.get("choices"), list):
        chunk["choices"] = list(chunk.get("choices") or [])
    return _strip(chunk, asked, harness_model)


def _strip(out: JSON, asked: Asked, harness_model: str | None) -> JSON:
    """Take what the harness did not ask for out of an answer whose choices are its own."""
    if not asked.token_ids:
        out.pop("prompt_token_ids", None)
    out.pop("meta_info", None)
    if harness_model is not None and "model" in out:
        out["model"] = harness_model
    for choice in out["choices"]:
        if not asked.token_ids:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
        if not asked.logprobs and "logprobs" in choice:
            choice["logprobs"] = None
        choice.pop("meta_info", None)
    return out


@dataclass(eq=False)
class Capture:
    """Token ids, logprobs and the finish of one call, gathered from the upstream's answer.

    Text arrives in pieces that are joined only when read (:attr:`content`, :attr:`tool_calls`):
    ``+=`` on an attribute or a dict value copies the whole text so far, quadratic over a long
    answer (3 µs a token at 32k tokens).
    """

    prompt_token_ids: list[int] | None = None
    # The same ids packed as little-endian uint32 where the stream parser took them out of the
    # chunk (SSEParser(take_ids=...)); whichever of the two was set last is the prompt.
    packed_prompt_ids: bytes | None = None
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    logprobs_complete: bool = True
    saw_token_ids: bool = False
    finish_reason: str | None = None
    stop_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    content_parts: list[str] = field(default_factory=list)
    tool_call_parts: dict[int, _CallParts] = field(default_factory=dict)

    @property
    def content(self) -> str:
        """The answer's text so far."""
        parts = self.content_parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]  # read again (the record reads it twice): no new join
        return parts[0] if parts else ""

    @property
    def tool_calls(self) -> dict[int, JSON]:
        """The tool calls so far by index: ``{"id", "name", "arguments"}`` each."""
        return {index: parts.joined() for index, parts in self.tool_call_parts.items()}

    def __eq__(self, other: object) -> bool:
        """Equal when everything gathered is, however the text was cut into pieces."""
        if not isinstance(other, Capture):
            return NotImplemented
        return self._gathered() == other._gathered()

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq has it

    def _gathered(self) -> tuple[Any, ...]:
        pieces = ("content_parts", "tool_call_parts")
        kept = tuple(getattr(self, f.name) for f in fields(self) if f.name not in pieces)
        return (*kept, self.content, self.tool_calls)

    def set_prompt_token_ids(self, ids: list[int]) -> None:
        """The prompt's token ids, as a list."""
        self.prompt_token_ids, self.packed_prompt_ids = list(ids), None

    def set_packed_prompt_ids(self, packed: bytes) -> None:
        """The prompt's token ids, as packed little-endian uint32."""
        self.prompt_token_ids, self.packed_prompt_ids = None, packed

    def add_response(self, response: JSON) -> None:
        """Gather from a whole (non-streamed) answer."""
        self.add_chunk(response)

    def add_chunk(self, chunk: JSON) -> None:
        """Gather from one stream chunk (or a whole answer: same fields, ``message``)."""
        # Runs for every read of every stream: fields are looked at once, in order of need.
        prompt = chunk.get("prompt_token_ids")
        if isinstance(prompt, list):
            self.set_prompt_token_ids(prompt)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:
                self._add_choice(choice)

    def _add_choice(self, choice: JSON) -> None:
        ids = choice.get("token_ids")
        if isinstance(ids, list):
            self.saw_token_ids = True
            self.completion_token_ids += ids
        prompt = choice.get("prompt_token_ids")
        if isinstance(prompt, list):
            self.set_prompt_token_ids(prompt)
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(entries := logprobs.get("content"), list):
            self.completion_logprobs += [logprob_of(e) for e in entries]
        elif ids and isinstance(ids, list):
            self.logprobs_complete = False
        meta = choice.get("meta_info")
        if meta and isinstance(meta.get("output_token_logprobs"), list):
            # SGLang: (logprob, id, text)
            self.saw_token_ids = True
            for entry in meta["output_token_logprobs"]:
                self.completion_logprobs.append(float(entry[0]))
                self.completion_token_ids.append(int(entry[1]))
        message = choice.get("delta") or choice.get("message")
        if message:
            content = message.get("content")
            if content and isinstance(content, str):
                self.content_parts.append(content)
            for call in message.get("tool_calls") or ():
                calls = self.tool_call_parts
                index = int(call.get("index", len(calls)))
                entry = calls.get(index)
                if entry is None:
                    entry = calls[index] = _CallParts()
                function = call.get("function") or {}
                entry.id = call.get("id") or entry.id
                _append_text(entry.name, function.get("name") or "")
                _append_text(entry.arguments, function.get("arguments") or "")
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
            stop = choice.get("stop_reason")
            self.stop_reason = stop if isinstance(stop, str) else None

    @property
    def has_tokens(self) -> bool:
        """Whether the upstream returned both prompt and completion token ids."""
        has_prompt = self.prompt_token_ids is not None or self.packed_prompt_ids is not None
        return has_prompt and self.saw_token_ids

    @property
    def logprobs(self) -> list[float] | None:
        """Completion logprobs aligned with the ids, or None when they are not complete."""
        if not self.logprobs_complete or len(self.completion_logprobs) != len(
            self.completion_token_ids
        ):
            return None
        return self.completion_logprobs


def logprob_of(entry: object) -> float:
    """One token's logprob; NaN (missing, as the trajectory records it) when the entry has none.

    Never 0.0: that is probability 1, which a trainer would take for a real logprob.
    """
    value = entry.get("logprob") if isinstance(entry, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return float("nan")


@dataclass(slots=True)
class _CallParts:
    """One tool call as it streams in: its id, and its name and arguments in pieces."""

    id: Any = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)

    def joined(self) -> JSON:
        """The call as the record takes it."""
        return {"id": self.id, "name": "".join(self.name), "arguments": "".join(self.arguments)}


def _append_text(parts: list[str], text: Any) -> None:
    if not isinstance(text, str):
        # Fails as ``str += text`` would (the call's capture stops, with this message).
        text = "" + text
    if text:
        parts.append(text)
