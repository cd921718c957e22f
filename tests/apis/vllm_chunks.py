"""vLLM answers and stream chunks as the proxy receives them, for the translators' tests."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
UPSTREAM = "Qwen/Qwen3-8B"
CAPTURE_FIELDS = ("token_ids", "prompt_token_ids", "logprobs")


def chunk(
    delta: JSON,
    token_ids: list[int],
    finish_reason: str | None = None,
    stop_reason: Any = None,
    **top: Any,
) -> JSON:
    """A vLLM stream chunk carrying the capture fields the proxy asks for."""
    choice: JSON = {
        "index": 0,
        "delta": delta,
        "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": -0.5} for t in token_ids]},
        "finish_reason": finish_reason,
        "token_ids": token_ids,
    }
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    return {
        "id": "chatcmpl-s1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": UPSTREAM,
        "choices": [choice],
        **top,
    }


def call_delta(index: int, arguments: str, call_id: str | None = None, name: str = "") -> JSON:
    """A tool-call delta: the first one of a call carries its id and name."""
    call: JSON = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call |= {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        if arguments:
            call["function"]["arguments"] = arguments
    return {"tool_calls": [call]}


def usage_chunk(prompt: int, completion: int) -> JSON:
    """The last chunk of a stream asked with ``include_usage``."""
    return {
        "id": "chatcmpl-s1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def chat_response(message: JSON, finish_reason: str | None = "stop", **choice: Any) -> JSON:
    """A whole vLLM answer with the capture fields the proxy asked for."""
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "model": UPSTREAM,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "logprobs": {"content": [{"token": "x", "logprob": -0.1}]},
                "finish_reason": finish_reason,
                "token_ids": [11, 12, 13],
                **choice,
            }
        ],
        "usage": {"prompt_tokens": 21, "completion_tokens": 3, "total_tokens": 24},
        "prompt_token_ids": list(range(21)),
    }
