"""What a policy is: given a prompt, a stream of sampled tokens with their logprobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rollstream.errors import RollstreamError


class PolicyError(RollstreamError):
    """The request cannot be served by this policy (answered as a 400 in OpenAI's format)."""


class GenerationFailed(RollstreamError):
    """The engine failed while generating (vLLM's GenerationError): mid-stream, an error event.

    A stream already under way ends as vLLM ends it: ``data: {"error": {..., "code": 500}}``,
    then ``data: [DONE]``; an answer not streamed is a 500.
    """


@dataclass(frozen=True)
class Sample:
    """One sampled token, its logprob, and the most likely alternatives (id, logprob)."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass(frozen=True)
class GenerationRequest:
    """What a policy knows about a request.

    ``messages`` and ``tools`` are None for ``/v1/completions`` (a raw prompt); ``session`` is
    the caller's API key, which rollstream harnesses set to the session id.
    """

    prompt_ids: list[int]
    max_tokens: int
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    session: str | None = None
    seed: int | None = None
    temperature: float = 1.0
    top_logprobs: int = 0
    ignore_eos: bool = False


class Generation(Protocol):
    """One generation in progress."""

    def next_token(self) -> Sample:
        """Sample the next token."""
        ...


class Policy(Protocol):
    """A model: starts generations."""

    name: str

    def start(self, request: GenerationRequest) -> Generation:
        """Begin generating for ``request``; raises PolicyError if it cannot be served."""
        ...
