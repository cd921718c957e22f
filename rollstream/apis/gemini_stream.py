"""A streamed Chat Completions answer as Gemini ``streamGenerateContent`` server-sent events.

Each event is a whole ``GenerateContentResponse`` (no event names, no ``[DONE]``). Text and
reasoning go out as they arrive. A tool call's arguments arrive in pieces but a
``functionCall`` part carries an ``args`` object, so each call is held until it is complete:
when the next call starts, or at the end. The last event carries ``finishReason`` and
``usageMetadata`` (the usage arrives after the finish, in a chunk without choices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rollstream.apis.errors import TranslationError
from rollstream.apis.gemini import gemini_error
from rollstream.apis.gemini_answer import (
    function_call_part,
    gemini_finish_reason,
    include_thoughts,
    response_id,
    usage_metadata,
)
from rollstream.apis.sse import SSEEvent

JSON = dict[str, Any]


@dataclass
class _Call:
    """A tool call being received."""

    call_id: str | None
    name: str
    arguments: list[str] = field(default_factory=list)

    def part(self) -> JSON:
        return function_call_part(self.call_id, self.name, "".join(self.arguments))


class GeminiStreamTranslator:
    """Chat Completions stream chunks in, Gemini ``streamGenerateContent`` events out.

    ``request`` is the harness's (see ``gemini_harness_request``): its ``model`` is each
    event's ``modelVersion``. Only choice 0 is read; capture fields are never copied.
    """

    def __init__(self, request: JSON) -> None:
        self._model = request.get("model")
        self._thoughts = include_thoughts(request)
        self._id: str | None = None
        self._done = False
        self._calls: dict[int, _Call] = {}  # upstream tool call index -> the call
        self._open: int | None = None  # the call still receiving arguments
        self._sent: set[int] = set()
        self._finish_reason: object = None
        self._prompt_tokens: int | None = None
        self._completion_tokens: int | None = None
        self._prompt_ids_seen = 0
        self._token_ids_seen = 0

    def feed(self, chunk: JSON) -> list[SSEEvent]:
        """The events for one decoded upstream chunk (none once the stream has ended)."""
        if self._done:
            return []
        error = chunk.get("error")
        if isinstance(error, dict):  # vLLM reports a failure mid-stream as a chunk
            code = error.get("code")
            return self.error(code if isinstance(code, int) else 500, str(error.get("message")))
        if self._id is None and isinstance(chunk.get("id"), str):
            self._id = response_id(chunk["id"])
        if self._model is None and isinstance(chunk.get("model"), str):
            self._model = chunk["model"]  # a request without the path's model: the upstream's
        prompt_ids = chunk.get("prompt_token_ids")
        if isinstance(prompt_ids, list):
            self._prompt_ids_seen = len(prompt_ids)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("prompt_tokens"), int):
                self._prompt_tokens = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                self._completion_tokens = usage["completion_tokens"]
        parts: list[JSON] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:  # one candidate per call
                parts += self._choice(choice)
        return [self._event(parts)] if parts else []

    def finish(self) -> list[SSEEvent]:
        """The last event: the calls still held, the finish reason and the usage."""
        if self._done:
            return []
        self._done = True
        parts = [self._calls[k].part() for k in sorted(self._calls) if k not in self._sent]
        prompt = self._prompt_tokens
        if prompt is None:
            prompt = self._prompt_ids_seen
        completion = self._completion_tokens
        if completion is None:
            completion = self._token_ids_seen
        event = self._event(
            parts,
            finishReason=gemini_finish_reason(self._finish_reason),
            usageMetadata=usage_metadata(prompt, completion),
        )
        return [event]

    def error(self, status: int, message: str) -> list[SSEEvent]:
        """An error event for an upstream failure; the stream ends with it."""
        if self._done:
            return []
        self._done = True
        return [SSEEvent(gemini_error(status, message))]

    def _choice(self, choice: JSON) -> list[JSON]:
        token_ids = choice.get("token_ids")
        if isinstance(token_ids, list):
            self._token_ids_seen += len(token_ids)
        if choice.get("finish_reason"):
            self._finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        parts: list[JSON] = []
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str) and thought and self._thoughts:
            parts.append({"text": thought, "thought": True})
        if isinstance(delta.get("content"), str) and delta["content"]:
            parts.append({"text": delta["content"]})
        for call in delta.get("tool_calls") or []:
            parts += self._tool_call(call)
        return parts

    def _tool_call(self, call: JSON) -> list[JSON]:
        """Take in one tool call delta; the part of the call it completed, if any."""
        k = int(call.get("index", 0))
        function = call.get("function") or {}
        parts: list[JSON] = []
        if k in self._sent:
            # Chat servers send each call's deltas together; a sent part cannot be amended.
            raise TranslationError(f"tool call {k} resumed after another began")
        if k not in self._calls:
            if self._open is not None:
                parts.append(self._calls[self._open].part())
                self._sent.add(self._open)
            self._calls[k] = _Call(call.get("id") or None, "")
            self._open = k
        entry = self._calls[k]
        if call.get("id") and entry.call_id is None:
            entry.call_id = call["id"]
        if isinstance(function.get("name"), str):
            entry.name += function["name"]
        if isinstance(function.get("arguments"), str):
            entry.arguments.append(function["arguments"])
        return parts

    def _event(self, parts: list[JSON], **extra: Any) -> SSEEvent:
        if self._id is None:
            self._id = response_id(None)
        candidate: JSON = {"content": {"role": "model", "parts": parts}}
        if "finishReason" in extra:
            candidate["finishReason"] = extra.pop("finishReason")
        candidate["index"] = 0
        data: JSON = {"candidates": [candidate], **extra}
        data["modelVersion"] = self._model
        data["responseId"] = self._id
        return SSEEvent(data)
