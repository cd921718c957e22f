"""A whole Chat Completions answer replayed as the chunks of a stream.

Some servers return no token ids in streams. In ``synthesize`` mode the interceptor asks them
without streaming, captures the whole answer, and still gives the harness the stream it asked
for: these chunks go through the very translators a real upstream stream goes through, so both
modes answer in the same shape.
"""

from __future__ import annotations

import json
from typing import Any

from rollstream.apis.errors import TranslationError

JSON = dict[str, Any]

_REASONING_KEYS = ("reasoning_content", "reasoning")


def chunks_from_answer(answer: JSON) -> list[JSON]:
    """The chunks a vLLM-like server streaming ``answer`` would send, ``[DONE]`` excluded.

    Per choice: a role chunk, the reasoning, the text, each tool call as its id and name and
    then its arguments, and a chunk with the finish. The capture fields keep vLLM's places
    (``prompt_token_ids`` on the first chunk; a choice's ``token_ids`` and ``logprobs``, all of
    them, on its finish chunk), so the stream translators strip them exactly as in a real
    stream. The usage comes last in a chunk without choices, as with ``include_usage``.
    """
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise TranslationError("the upstream answer has no choices")
    head: JSON = {
        "id": answer.get("id"),
        "object": "chat.completion.chunk",
        "created": answer.get("created"),
        "model": answer.get("model"),
    }
    chunks: list[JSON] = []
    for position, choice in enumerate(choices):
        if isinstance(choice, dict):
            index = choice.get("index", position)
            chunks += [head | {"choices": [c]} for c in _choice_chunks(choice, index)]
    if isinstance(answer.get("prompt_token_ids"), list):
        chunks[0]["prompt_token_ids"] = answer["prompt_token_ids"]
    if isinstance(answer.get("usage"), dict):
        chunks.append(head | {"choices": [], "usage": answer["usage"]})
    return chunks


def _choice_chunks(choice: JSON, index: int) -> list[JSON]:
    """The streamed choices (``delta`` form) of one whole choice."""
    message = choice.get("message") or {}

    def delta(fields: JSON) -> JSON:
        return {"index": index, "delta": fields, "logprobs": None, "finish_reason": None}

    out = [delta({"role": "assistant", "content": ""})]
    for key in _REASONING_KEYS:
        if isinstance(message.get(key), str) and message[key]:
            out.append(delta({key: message[key]}))
            break  # servers send one of the two names; the translators read either
    if isinstance(message.get("content"), str) and message["content"]:
        out.append(delta({"content": message["content"]}))
    for k, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        opening: JSON = {
            "index": k,
            "type": "function",
            "function": {"name": function.get("name") or "", "arguments": ""},
        }
        if call.get("id"):
            opening["id"] = call["id"]
        out.append(delta({"tool_calls": [opening]}))
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        if arguments:
            out.append(delta({"tool_calls": [{"index": k, "function": {"arguments": arguments}}]}))
    finish = delta({}) | {
        "logprobs": choice.get("logprobs"),
        "finish_reason": choice.get("finish_reason"),
        "stop_reason": choice.get("stop_reason"),
    }
    for key in ("token_ids", "prompt_token_ids"):
        if key in choice:
            finish[key] = choice[key]
    out.append(finish)
    return out
