"""A Chat Completions answer as Gemini's ``GenerateContentResponse``.

Whole answers here; streamed ones in :mod:`gemini_stream`, which shares the parts, finish
reasons and usage defined here. Thoughts come first as ``{"text", "thought": true}`` parts,
then the text, then each tool call as a ``functionCall`` part holding the Chat call's id.
"""

from __future__ import annotations

import uuid
from typing import Any

from rollstream.apis.anthropic import tool_input
from rollstream.apis.errors import TranslationError

JSON = dict[str, Any]

_FINISH_REASONS = {"length": "MAX_TOKENS", "content_filter": "SAFETY"}


def include_thoughts(request: JSON) -> bool:
    """Whether the harness asked for thought parts (``thinkingConfig.includeThoughts``).

    Google's default is no: the model may still reason, the answer just leaves it out.
    """
    config = request.get("generationConfig")
    thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
    if not isinstance(thinking, dict):
        return False
    # Google's JSON takes proto field names too, and google-genai sends this one so.
    return (thinking.get("includeThoughts") or thinking.get("include_thoughts")) is True


def chat_to_gemini(response: JSON, request: JSON) -> JSON:
    """A whole Chat Completions answer as a ``GenerateContentResponse``.

    ``request`` is the harness's (see ``gemini_harness_request``): its ``model`` is the
    answer's ``modelVersion``. Capture fields (token ids, logprobs) are never copied.
    """
    choices = response.get("choices") if isinstance(response, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise TranslationError("the upstream answer has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    parts: list[JSON] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning and include_thoughts(request):
        parts.append({"text": reasoning, "thought": True})
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append({"text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(
            function_call_part(call.get("id"), function.get("name"), function.get("arguments"))
        )
    usage = response.get("usage") or {}
    # Without a usage object, vLLM's capture fields still tell the counts.
    prompt = usage.get("prompt_tokens") or len(response.get("prompt_token_ids") or [])
    completion = usage.get("completion_tokens") or len(choice.get("token_ids") or [])
    candidate = {
        "content": {"role": "model", "parts": parts},
        "finishReason": gemini_finish_reason(choice.get("finish_reason")),
        "index": 0,
    }
    return {
        "candidates": [candidate],
        "usageMetadata": usage_metadata(prompt, completion),
        "modelVersion": request.get("model") or response.get("model"),
        "responseId": response_id(response.get("id")),
    }


def function_call_part(call_id: object, name: object, arguments: object) -> JSON:
    """A ``functionCall`` part: the Chat tool call's id, name and arguments as an object."""
    call: JSON = {
        "id": call_id if isinstance(call_id, str) and call_id else "call_" + uuid.uuid4().hex,
        "name": name if isinstance(name, str) else "",
        "args": tool_input(arguments),
    }
    return {"functionCall": call}


def gemini_finish_reason(finish_reason: object) -> str:
    """Gemini's ``finishReason`` for a Chat Completions ``finish_reason``.

    Gemini ends a turn with tool calls with ``STOP`` too.
    """
    if finish_reason in (None, "stop", "tool_calls", "function_call"):
        return "STOP"
    return _FINISH_REASONS.get(str(finish_reason), "OTHER")


def usage_metadata(prompt_tokens: int, completion_tokens: int) -> JSON:
    """Gemini's ``usageMetadata`` for the two counts."""
    return {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": completion_tokens,
        "totalTokenCount": prompt_tokens + completion_tokens,
    }


def response_id(upstream_id: object) -> str:
    """The answer's ``responseId``: the upstream's id, or a fresh one."""
    return upstream_id if isinstance(upstream_id, str) and upstream_id else uuid.uuid4().hex
