"""One adapter per harness API: its path, its translation to Chat Completions and back, its errors.

The addon looks the adapter up by path and never branches on the API itself. A Gemini path
names the model and whether the call streams: its adapter carries them (``gemini``), while
:data:`ADAPTER_BY_KIND`'s Gemini adapter, used for answers, streams and errors, needs neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from rollstream.apis.anthropic import (
    anthropic_count_tokens_request,
    anthropic_error,
    anthropic_to_chat,
    chat_to_anthropic,
)
from rollstream.apis.anthropic_stream import AnthropicStreamTranslator
from rollstream.apis.chat import Asked, strip_chunk, strip_response
from rollstream.apis.errors import TranslationError
from rollstream.apis.gemini import (
    COUNT_TOKENS,
    GeminiPath,
    gemini_count_tokens_answer,
    gemini_count_tokens_request,
    gemini_error,
    gemini_harness_request,
    gemini_path,
    gemini_to_chat,
)
from rollstream.apis.gemini_answer import chat_to_gemini
from rollstream.apis.gemini_stream import GeminiStreamTranslator
from rollstream.apis.limits import (
    OPENAI_OVERFLOW_CODE,
    ContextOverflow,
    anthropic_overflow_message,
    context_overflow,
    gemini_overflow_message,
)
from rollstream.apis.responses import responses_error, responses_to_chat
from rollstream.apis.responses_answer import chat_to_responses
from rollstream.apis.responses_stream import ResponsesStreamTranslator
from rollstream.apis.sse import DONE, SSEEvent
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
    gemini: GeminiPath | None = None  # a Gemini call's path: its model, whether it streams

    def harness_request(self, body: JSON) -> JSON:
        """The harness's request as the call records it, and as :meth:`answer` takes it.

        A Gemini body gains the model its path named (``model``); other bodies are unchanged.
        """
        if self.gemini is not None:
            return gemini_harness_request(body, self.gemini.model)
        return body

    def to_chat(self, body: JSON, upstream_model: str) -> JSON:
        """The harness's request as Chat Completions."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return anthropic_to_chat(body, upstream_model)
        if self.kind is ApiKind.RESPONSES:
            return responses_to_chat(body, upstream_model)
        if self.kind is ApiKind.GEMINI:
            stream = self.gemini is not None and self.gemini.stream
            if stream and self.gemini is not None and not self.gemini.sse:
                # Without alt=sse Google streams a JSON array; only SSE is served here.
                raise TranslationError("streamGenerateContent is served with alt=sse only", "alt")
            return gemini_to_chat(body, upstream_model, stream=stream)
        return dict(body, model=upstream_model)

    def answer(self, response: JSON, request: JSON, asked: Asked) -> JSON:
        """A whole Chat Completions answer in the harness's format."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return chat_to_anthropic(response, request)
        if self.kind is ApiKind.RESPONSES:
            return chat_to_responses(response, request)
        if self.kind is ApiKind.GEMINI:
            return chat_to_gemini(response, request)
        return strip_response(response, asked, request.get("model"))

    def stream(self, request: JSON, asked: Asked) -> StreamTranslator:
        """A translator for one streamed answer."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return AnthropicStreamTranslator(request)
        if self.kind is ApiKind.RESPONSES:
            return ResponsesStreamTranslator(request)
        if self.kind is ApiKind.GEMINI:
            return GeminiStreamTranslator(request)
        return ChatPassthrough(asked, request.get("model"))

    def error(self, status: int, message: str) -> JSON:
        """An error body in the harness's format; a context overflow in the API's own words."""
        overflow = context_overflow(message) if status == 400 else None
        if overflow is not None:
            return self._overflow(overflow, message)
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return anthropic_error(status, message)
        if self.kind is ApiKind.RESPONSES:
            return responses_error(status, message)
        if self.kind is ApiKind.GEMINI:
            return gemini_error(status, message)
        return chat_error(status, message)

    def _overflow(self, overflow: ContextOverflow, message: str) -> JSON:
        """The 400 each API answers a request over the context with (harnesses act on it)."""
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return anthropic_error(400, anthropic_overflow_message(overflow))
        if self.kind is ApiKind.GEMINI:
            return gemini_error(400, gemini_overflow_message(overflow))
        body = (
            responses_error(400, message, "input")
            if self.kind is ApiKind.RESPONSES
            else chat_error(400, message)
        )
        body["error"]["code"] = OPENAI_OVERFLOW_CODE
        body["error"]["param"] = "input" if self.kind is ApiKind.RESPONSES else "messages"
        return body

    def count_tokens_request(self, body: JSON, upstream_model: str) -> JSON:
        """A token-counting body (see :func:`count_tokens_adapter`) as a vLLM ``/tokenize`` body."""
        if self.kind is ApiKind.GEMINI:
            return gemini_count_tokens_request(body, upstream_model)
        if self.kind is ApiKind.ANTHROPIC_MESSAGES:
            return anthropic_count_tokens_request(body, upstream_model)
        raise TranslationError(f"{self.kind.value} has no token counting")

    def count_tokens_answer(self, count: int) -> JSON:
        """The upstream tokenizer's ``count`` as the API's token-counting answer."""
        if self.kind is ApiKind.GEMINI:
            return gemini_count_tokens_answer(count)
        return {"input_tokens": count}


ADAPTERS = {
    "/v1/chat/completions": Adapter(ApiKind.CHAT_COMPLETIONS, "/v1/chat/completions"),
    "/v1/messages": Adapter(ApiKind.ANTHROPIC_MESSAGES, "/v1/messages"),
    "/v1/responses": Adapter(ApiKind.RESPONSES, "/v1/responses"),
}
GEMINI_PATH = "/v1beta/models/{model}:generateContent"
ADAPTER_BY_KIND = {adapter.kind: adapter for adapter in ADAPTERS.values()} | {
    ApiKind.GEMINI: Adapter(ApiKind.GEMINI, GEMINI_PATH)
}
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


def adapter_for(path: str) -> Adapter | None:
    """The adapter of a request path, or None for other paths.

    The query string is ignored except by Gemini paths (``alt=sse``). Gemini's
    ``countTokens`` is not an LLM call: None, as for Anthropic's ``count_tokens``.
    """
    bare = path.split("?", 1)[0].rstrip("/")
    if bare.startswith("/chat/completions") or bare.startswith("/responses") or bare == "/messages":
        bare = "/v1" + bare  # harnesses configured with a base URL without /v1
    adapter = ADAPTERS.get(bare)
    if adapter is None and "/models/" in bare:
        gemini = gemini_path(path)
        if gemini is not None and gemini.action != COUNT_TOKENS:
            return Adapter(ApiKind.GEMINI, bare, gemini)
    return adapter


def count_tokens_adapter(path: str) -> Adapter | None:
    """The adapter whose API counts tokens at ``path``, or None for other paths.

    Anthropic's ``/v1/messages/count_tokens`` and Gemini's ``models/{model}:countTokens``: not
    LLM calls, answered from the upstream's ``/tokenize``. A Gemini adapter knows the model.
    """
    bare = path.split("?", 1)[0].rstrip("/")
    if bare == COUNT_TOKENS_PATH:
        return ADAPTER_BY_KIND[ApiKind.ANTHROPIC_MESSAGES]
    gemini = gemini_path(path) if "/models/" in bare else None
    if gemini is not None and gemini.action == COUNT_TOKENS:
        return Adapter(ApiKind.GEMINI, bare, gemini)
    return None
