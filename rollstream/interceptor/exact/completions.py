"""Exact context upstream: a Chat call sent as ``/v1/completions`` with token ids, answered as Chat.

The request keeps the harness's sampling parameters and asks for token ids and logprobs; the
sampled ids are split into content, reasoning and tool calls by the model family's parsers, as
vLLM's tool and reasoning parsers split them for Chat Completions, so the rest of the
interceptor (records, the Responses, Anthropic and Gemini translators) sees an ordinary Chat
answer with the ids the model sampled.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rollstream.models.family import Family, ParsedTurn

JSON = dict[str, Any]

#: Chat parameters that mean the same on /v1/completions.
_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "n",
    # vLLM's sampling extensions, the same on both endpoints.
    "min_tokens",
    "ignore_eos",
    "stop_token_ids",
    "include_stop_str_in_output",
)


def completion_request(
    chat: JSON,
    prompt_ids: list[int],
    model: str,
    top_logprobs: int,
    max_model_len: int | None = None,
) -> JSON:
    """The ``/v1/completions`` body for a Chat request whose prompt is ``prompt_ids``.

    ``max_model_len``: the served context, as the upstream reported it; an answer the harness
    did not bound may take the rest of it, as under Chat Completions.
    """
    body: JSON = {
        "model": model,
        "prompt": prompt_ids,
        "stream": bool(chat.get("stream")),
        "return_token_ids": True,
        "logprobs": top_logprobs,
        # Special tokens in the text: the tool parser needs <tool_call> markers when a model
        # declares them special; content is cleaned of the end-of-turn token below.
        "skip_special_tokens": False,
    }
    # Always sent: /v1/completions defaults to 16 tokens where Chat Completions defaults to the
    # rest of the context, and vLLM 0.32 reads null as 16 too (a real server cut every unbounded
    # exact-context answer there); null only where the context is not known.
    asked = chat.get("max_completion_tokens") or chat.get("max_tokens")
    if asked is None and max_model_len is not None:
        asked = max(1, max_model_len - len(prompt_ids))
    body["max_tokens"] = asked
    for key in _SAMPLING:
        if key in chat:
            body[key] = chat[key]
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    return body


def _chat_logprobs(logprobs: JSON | None) -> JSON | None:
    """Completions' ``{tokens, token_logprobs, top_logprobs}`` as Chat's ``{content: [...]}``."""
    if not logprobs:
        return None
    tokens = logprobs.get("tokens") or []
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    content = []
    for token, value, top in zip(tokens, values, tops, strict=False):
        alternatives = [{"token": t, "logprob": lp} for t, lp in (top or {}).items()]
        content.append({"token": token, "logprob": value, "top_logprobs": alternatives})
    return {"content": content}


def _sampled_ids(family: Family, choice: JSON) -> list[int]:
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return ids
    # No ids echoed (a server without return_token_ids): the text is all there is.
    return family.tokenizer.encode(choice.get("text") or "")


def chat_from_completion(
    body: JSON, family: Family, prompt_ids: Sequence[int] = (), tools: Any = None
) -> tuple[JSON, ParsedTurn]:
    """A non-streamed completion as a Chat Completions response, and the family's parse."""
    choice = (body.get("choices") or [{}])[0]
    parsed = family.parse(_sampled_ids(family, choice), prompt_ids, tools)
    message = parsed.message()
    finish = choice.get("finish_reason")
    if parsed.tool_calls:
        finish = "tool_calls" if finish == "stop" else finish
    chat_choice: JSON = {
        "index": 0,
        "message": message,
        "finish_reason": finish,
        "logprobs": _chat_logprobs(choice.get("logprobs")),
        "token_ids": choice.get("token_ids"),
    }
    chat = {
        "id": str(body.get("id", "")).replace("cmpl-", "chatcmpl-", 1),
        "object": "chat.completion",
        "created": body.get("created", 0),
        "model": body.get("model", ""),
        "choices": [chat_choice],
        "usage": body.get("usage"),
        "prompt_token_ids": choice.get("prompt_token_ids", body.get("prompt_token_ids")),
    }
    return chat, parsed


class CompletionStreamToChat:
    """Completion stream chunks in, Chat Completions chunks out, parsed by the model family.

    The sampled ids of each chunk go through the family's stream parser (content and reasoning
    as they grow, tool calls whole at the end); token ids and logprobs go on the chunk that
    carried them, so the interceptor accumulates exactly what was sampled.
    """

    def __init__(self, family: Family, prompt_ids: Sequence[int] = (), tools: Any = None) -> None:
        self.family = family
        self.parser = family.stream_parser(prompt_ids, tools)
        self._first = True

    def _chunk(self, body: JSON, delta: JSON, choice: JSON, finish: str | None) -> JSON:
        out: JSON = {
            "id": str(body.get("id", "")).replace("cmpl-", "chatcmpl-", 1),
            "object": "chat.completion.chunk",
            "created": body.get("created", 0),
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "finish_reason": finish,
                    "logprobs": _chat_logprobs(choice.get("logprobs")),
                    "token_ids": choice.get("token_ids"),
                }
            ],
        }
        if self._first:
            out["choices"][0]["delta"] = {"role": "assistant", **delta}
            prompt_ids = choice.get("prompt_token_ids", body.get("prompt_token_ids"))
            if prompt_ids is not None:
                out["prompt_token_ids"] = prompt_ids
            self._first = False
        return out

    @property
    def parsed(self) -> ParsedTurn | None:
        """The family's parse of the whole completion, once it has ended."""
        return self.parser.final

    def feed(self, body: JSON) -> Iterator[JSON]:
        """The Chat chunks for one completion chunk (none, one, or a usage chunk)."""
        choices = body.get("choices") or []
        if not choices:  # the usage chunk
            if body.get("usage") is not None:
                yield {
                    "id": str(body.get("id", "")).replace("cmpl-", "chatcmpl-", 1),
                    "object": "chat.completion.chunk",
                    "created": body.get("created", 0),
                    "model": body.get("model", ""),
                    "choices": [],
                    "usage": body["usage"],
                }
            return
        choice = choices[0]
        finish = choice.get("finish_reason")
        parsed = self.parser.feed(_sampled_ids(self.family, choice))
        if finish is not None:
            rest = self.parser.finish()
            parsed.content += rest.content
            parsed.reasoning += rest.reasoning
            parsed.tool_calls += rest.tool_calls
            if rest.tool_calls and finish == "stop":
                finish = "tool_calls"
        delta: JSON = {}
        if parsed.reasoning:
            delta["reasoning_content"] = delta["reasoning"] = parsed.reasoning
        if parsed.content:
            delta["content"] = parsed.content
        if parsed.tool_calls:
            delta["tool_calls"] = parsed.tool_calls
        yield self._chunk(body, delta, choice, finish)
