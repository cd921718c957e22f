"""A Chat Completions answer as a Responses ``response`` object, and its output items.

The whole answer is turned here; :mod:`responses_stream` builds the same items event by event.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from rollstream.apis.errors import TranslationError
from rollstream.apis.responses import JSON, namespaces


def new_id(prefix: str) -> str:
    """A fresh id in OpenAI's style: ``prefix_`` and 32 hex digits."""
    return f"{prefix}_{uuid.uuid4().hex}"


def chat_to_responses(response: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The Responses ``response`` object for a whole Chat Completions answer.

    ``request`` is the harness's original Responses request: the object echoes its settings.
    Capture fields (token ids, logprobs) are never copied.
    """
    choices = response.get("choices") if isinstance(response, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise TranslationError("the upstream answer has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    output: list[JSON] = []
    spaces = namespaces(request)
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        output.append(reasoning_item(new_id("rs"), reasoning))
    content = message.get("content")
    if isinstance(content, str) and content:
        output.append(message_item(new_id("msg"), content, "completed"))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        output.append(
            function_call_item(
                new_id("fc"),
                call.get("id") or new_id("call"),
                function.get("name") or "",
                arguments if isinstance(arguments, str) else json.dumps(arguments),
                "completed",
                spaces.get(function.get("name") or ""),
            )
        )
    return response_object(
        request,
        response_id=new_id("resp"),
        created_at=int(time.time()),
        status="incomplete" if choice.get("finish_reason") == "length" else "completed",
        output=output,
        usage=response_usage(response.get("usage")),
    )


def message_item(item_id: str, text: str, status: str) -> JSON:
    """An assistant ``message`` output item holding one text part."""
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [text_part(text)],
    }


def text_part(text: str) -> JSON:
    """An ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": []}


def reasoning_item(item_id: str, text: str) -> JSON:
    """A ``reasoning`` output item whose summary is the model's reasoning text."""
    return {"type": "reasoning", "id": item_id, "summary": [{"type": "summary_text", "text": text}]}


def function_call_item(
    item_id: str,
    call_id: str,
    name: str,
    arguments: str,
    status: str,
    namespace: str | None = None,
) -> JSON:
    """A ``function_call`` output item; ``call_id`` is the upstream tool call id, unchanged.

    ``namespace``: the group the request declared the function in (Codex refuses a call of a
    grouped function without it).
    """
    item: JSON = {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def response_usage(chat_usage: Any) -> JSON | None:
    """Responses usage from Chat Completions usage; None when the upstream reported none."""
    if not isinstance(chat_usage, dict):
        return None
    prompt = int(chat_usage.get("prompt_tokens") or 0)
    completion = int(chat_usage.get("completion_tokens") or 0)
    cached = (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (chat_usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": int(reasoning)},
        "total_tokens": int(chat_usage.get("total_tokens") or prompt + completion),
    }


def response_object(
    request: JSON,
    *,
    response_id: str,
    created_at: int,
    status: str,
    output: list[JSON],
    usage: JSON | None,
    error: JSON | None = None,
) -> JSON:
    """The Responses ``response`` object, echoing the settings of the original request."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "error": error,
        "model": request.get("model", ""),
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools", []),
        "usage": usage,
        "instructions": request.get("instructions"),
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "max_output_tokens": request.get("max_output_tokens"),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "metadata": {},
    }
