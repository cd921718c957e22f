"""One adapter per harness API: its path, its translation to Chat Completions and back, its errors.

The addon looks the adapter up by path and never branches on the API itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rollstream.interceptor.translate.anthropic import (
    anthropic_error,
    anthropic_to_chat,
    chat_to_anthropic,
)
from rollstream.interceptor.translate.anthropic_stream import AnthropicStreamTranslator
from rollstream.interceptor.translate.chat import Asked, strip_chunk, strip_response
from rollstream.interceptor.translate.responses import (
    chat_to_responses,
    responses_error,
    responses_to_chat,
)
from rollstream.interceptor.translate.responses_stream import ResponsesStreamTranslator
from rollstream.interceptor.translate.sse import DONE, SSEEvent
from rollstream.schemas import ApiKind

JSON = dict[str, Any]


class StreamTranslator(Protocol):
    """Chat Completions chunks in, the harness's events out."""

    def feed(self, chunk: JSON) -> list[SSEEvent]:
        """One upstream chunk."""
        ...

    def finish(self) -> list[SSEEvent]:
        """The upstream stream ended."""
        ...

    def error(self, status: int, message: str) -> list[SSEEvent]:
        """The upstream broke mid-stream: a well-formed error event."""
        ...


class ChatPassthrough:
    """Chat Completions to a Chat Completions harness: chunks pass, minus unasked capture fields."""

    def __init__(self, asked: Asked, harness_model: str | None) -> None:
        self.asked = asked
        self.harness_model = harness_model
        self._done = False

    def feed(self, chunk: JSON) -> list[SSEEvent]:
        """Strip and forward one chunk."""
        out = strip_chunk(chunk, self.asked, self.harness_model)
        return [SSEEvent(out)] if out is not None else []

    def finish(self) -> list[SSEEvent]:
        """``[DONE]``, once."""
        if self._done:
            return []
        self._done = True
        return [SSEEvent(DONE)]

    def error(self, status: int, message: str) -> list[SSEEvent]:
        """An OpenAI error object as a stream event, then ``[DONE]``."""
        return [SSEEvent(chat_error(status, message)), *self.finish()]


def chat_error(status: int, message: str) -> JSON:
    """OpenAI's error body."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    if status == 401:
        kind = "authentication_error"  # as the Responses and Anthropic adapters answer
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


@dataclass(frozen=True)
class Adapter:
    """How one API maps onto Chat Completions."""

    kind: ApiKind
    path: str

    def to_chat(self, body: JSON, upstream_model: str) -> JSON:
        """The harness's request as Chat Completions."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return anthropic_to_chat(body, upstream_model)
        if self.kind is ApiKind.RESPONSES:
            return responses_to_chat(body, upstream_model)
        return dict(body, model=upstream_model)

    def answer(self, response: JSON, request: JSON, asked: Asked) -> JSON:
        """A whole Chat Completions answer in the harness's format."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return chat_to_anthropic(response, request)
        if self.kind is ApiKind.RESPONSES:
            return chat_to_responses(response, request)
        return strip_response(response, asked, request.get("model"))

    def stream(self, request: JSON, asked: Asked) -> StreamTranslator:
        """A translator for one streamed answer."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return AnthropicStreamTranslator(request)
        if self.kind is ApiKind.RESPONSES:
            return ResponsesStreamTranslator(request)
        return ChatPassthrough(asked, request.get("model"))

    def error(self, status: int, message: str) -> JSON:
        """An error body in the harness's format."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return anthropic_error(status, message)
        if self.kind is ApiKind.RESPONSES:
            return responses_error(status, message)
        return chat_error(status, message)


ADAPTERS = {
    "/v1/chat/completions": Adapter(ApiKind.CHAT_COMPLETIONS, "/v1/chat/completions"),
    "/v1/messages": Adapter(ApiKind.ANTHROPIC_MESSAGES, "/v1/messages"),
    "/v1/responses": Adapter(ApiKind.RESPONSES, "/v1/responses"),
}
ADAPTER_BY_KIND = {adapter.kind: adapter for adapter in ADAPTERS.values()}
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


def adapter_for(path: str) -> Adapter | None:
    """The adapter of a request path (query string ignored), or None for other paths."""
    bare = path.split("?", 1)[0].rstrip("/")
    if bare.startswith("/chat/completions") or bare.startswith("/responses") or bare == "/messages":
        bare = "/v1" + bare  # harnesses configured with a base URL without /v1
    return ADAPTERS.get(bare)
