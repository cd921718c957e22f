"""The OpenAI/vLLM wire format: request models, response and chunk builders, errors.

Pure functions: the server only wires them to HTTP.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollstream.dev.backend.policies.base import Sample
from rollstream.models.tokenizer import ChatTokenizer

JSON = dict[str, Any]


#: vLLM 0.32's error ``type`` by HTTP status (its exception's name).
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


class ApiError(Exception):
    """An error answered as vLLM (0.32) answers one: OpenAI's shape, the status as the code.

    ``value``: the offending value of a parameter, which vLLM appends to the message.
    """

    def __init__(
        self,
        status: int,
        message: str,
        type_: str | None = None,
        param: str | None = None,
        value: Any = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_ or _ERROR_TYPES.get(status, "BadRequestError")
        self.param = param
        self.value = value

    def body(self) -> JSON:
        """The JSON body: ``{"error": {message, type, param, code}}``."""
        message = self.message
        if self.param is not None and self.value is not None:
            message += f" (parameter={self.param}, value={self.value})"
        return {
            "error": {
                "message": message,
                "type": self.type,
                "param": self.param,
                "code": self.status,
            }
        }


class _Request(BaseModel):
    # Clients send many fields we do not use; they are accepted and ignored.
    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    seed: int | None = None
    n: int = 1
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    ignore_eos: bool = False

    @property
    def stop_strings(self) -> list[str]:
        """``stop`` as a list."""
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class ChatRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int = Field(default=0, ge=0, le=20)
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None

    @property
    def parse_tools(self) -> bool:
        """Whether the output is parsed for tool calls (tools given, tool_choice not none)."""
        return bool(self.tools) and self.tool_choice != "none"


class CompletionRequest(_Request):
    """``POST /v1/completions`` (a prompt as text or token ids)."""

    prompt: str | list[int]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    max_tokens: int | None = Field(default=16, ge=1)


def new_id(prefix: str) -> str:
    """A response id in vLLM's style."""
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    """The ``created`` timestamp."""
    return int(time.time())


@dataclass(frozen=True)
class Header:
    """What every response or chunk of one request repeats: id, creation time, model."""

    model: str
    id: str
    created: int = field(default_factory=now)

    @classmethod
    def new(cls, prefix: str, model: str) -> Header:
        """A header with a fresh id."""
        return cls(model=model, id=new_id(prefix))

    def fields(self, obj: str) -> JSON:
        """The leading fields of a body of type ``obj``."""
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def chunk_fields(self, obj: str) -> JSON:
        """The leading fields of a streamed chunk: vLLM names the server in each."""
        return self.fields(obj) | {"system_fingerprint": FINGERPRINT}


def model_permission() -> JSON:
    """A model card's permission entry, as vLLM lists one (the defaults of OpenAI's)."""
    return {
        "id": new_id("modelperm"),
        "object": "model_permission",
        "created": now(),
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }


#: The server's name in streamed chunks (vLLM writes ``vllm-<version>``).
FINGERPRINT = "rollstream-reference-backend"


def usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int | None = None) -> JSON:
    """The ``usage`` object; with a reasoning parser, the reasoning tokens among the completion."""
    body: JSON = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": None,
    }
    if reasoning_tokens is not None:
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return body


def _token_label(tokenizer: ChatTokenizer, token_id: int, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else tokenizer.token_text(token_id)


def chat_logprob_entry(tokenizer: ChatTokenizer, sample: Sample, as_ids: bool) -> JSON:
    """One ``choices[].logprobs.content[]`` entry: token, logprob, bytes, top_logprobs."""

    def entry(token_id: int, logprob: float) -> JSON:
        label = _token_label(tokenizer, token_id, as_ids)
        return {"token": label, "logprob": logprob, "bytes": list(label.encode())}

    return entry(sample.token_id, sample.logprob) | {
        "top_logprobs": [entry(t, lp) for t, lp in sample.top]
    }


def completion_logprobs(
    tokenizer: ChatTokenizer, samples: list[Sample], as_ids: bool, text_offset: int
) -> JSON:
    """The legacy completions ``logprobs`` object for ``samples``."""
    tokens, offsets, offset = [], [], text_offset
    for s in samples:
        label = _token_label(tokenizer, s.token_id, as_ids)
        tokens.append(label)
        offsets.append(offset)
        offset += len(label)
    return {
        "tokens": tokens,
        "token_logprobs": [s.logprob for s in samples],
        "top_logprobs": [
            {_token_label(tokenizer, t, as_ids): lp for t, lp in s.top} for s in samples
        ],
        "text_offset": offsets,
    }


def chat_response(
    header: Header,
    *,
    message: JSON,
    finish_reason: str | None,
    stop_reason: str | None,
    logprobs: list[JSON] | None,
    prompt_ids: list[int],
    token_ids: list[int],
    return_token_ids: bool,
    reasoning_tokens: int | None = None,
) -> JSON:
    """A non-streaming ``chat.completion`` in vLLM's shape."""
    choice: JSON = {
        "index": 0,
        "message": message,
        "logprobs": {"content": logprobs} if logprobs is not None else None,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }
    body: JSON = header.fields("chat.completion") | {
        "choices": [choice],
        "usage": usage(len(prompt_ids), len(token_ids), reasoning_tokens),
        "prompt_logprobs": None,
    }
    if return_token_ids:
        choice["token_ids"] = token_ids
        body["prompt_token_ids"] = prompt_ids
    return body


def chat_chunk(
    header: Header,
    *,
    delta: JSON,
    token_ids: list[int] | None = None,
    logprobs: list[JSON] | None = None,
    finish_reason: str | None = None,
    stop_reason: str | None = None,
    prompt_ids: list[int] | None = None,
) -> JSON:
    """One ``chat.completion.chunk``; ``token_ids`` are this chunk's delta tokens."""
    choice: JSON = {
        "index": 0,
        "delta": delta,
        "logprobs": {"content": logprobs} if logprobs is not None else None,
        "finish_reason": finish_reason,
    }
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    if token_ids is not None:
        choice["token_ids"] = token_ids
    chunk: JSON = header.chunk_fields("chat.completion.chunk") | {"choices": [choice]}
    if prompt_ids is not None:
        chunk["prompt_token_ids"] = prompt_ids
    return chunk


def usage_chunk(
    header: Header, obj: str, prompt: int, completion: int, reasoning_tokens: int | None = None
) -> JSON:
    """The last chunk of a stream with ``include_usage``: no choices, the usage."""
    return header.chunk_fields(obj) | {
        "choices": [],
        "usage": usage(prompt, completion, reasoning_tokens),
    }


def completion_choice(
    *,
    text: str,
    logprobs: JSON | None,
    finish_reason: str | None,
    stop_reason: str | None,
    prompt_ids: list[int] | None,
    token_ids: list[int] | None,
) -> JSON:
    """One ``text_completion`` choice (token ids in the choice, as vLLM returns them)."""
    choice: JSON = {
        "index": 0,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }
    if token_ids is not None:
        choice["token_ids"] = token_ids
    if prompt_ids is not None:
        choice["prompt_token_ids"] = prompt_ids
    return choice


def completion_body(
    header: Header, choice: JSON, obj_usage: JSON | None, chunk: bool = False
) -> JSON:
    """A ``text_completion`` response, or a stream's chunk (``chunk``)."""
    fields = header.chunk_fields if chunk else header.fields
    body: JSON = fields("text_completion") | {"choices": [choice]}
    if obj_usage is not None:
        body["usage"] = obj_usage
    return body
