"""Anthropic Messages <-> Chat Completions: requests, whole answers, errors, token counting.

The streaming answer lives in :mod:`rollstream.apis.anthropic_stream`; both
share the stop-reason and tool-argument rules defined here.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from rollstream.apis.errors import TranslationError
from rollstream.models.family import reasoning_fields

JSON = dict[str, Any]

_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_SAMPLING = ("max_tokens", "temperature", "top_p", "top_k")
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_to_chat(body: JSON, upstream_model: str) -> JSON:
    """An Anthropic ``/v1/messages`` request as a Chat Completions request for ``upstream_model``.

    ``metadata``, ``thinking`` and other Anthropic-only settings are not forwarded.
    """
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    chat: JSON = {"model": upstream_model, "messages": _chat_messages(body)}
    tools = _chat_tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
        # vLLM rejects a tool_choice without tools, so it only travels with them.
        chat.update(_chat_tool_choice(body.get("tool_choice")))
    for key in _SAMPLING:
        if body.get(key) is not None:
            chat[key] = body[key]
    stop = body.get("stop_sequences")
    if stop:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise TranslationError("stop_sequences must be a list of strings", "stop_sequences")
        chat["stop"] = list(stop)
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def anthropic_count_tokens_request(body: JSON, upstream_model: str) -> JSON:
    """A ``/v1/messages/count_tokens`` body as a vLLM ``/tokenize`` body for the same prompt."""
    chat = anthropic_to_chat(body, upstream_model)
    out: JSON = {"model": upstream_model, "messages": chat["messages"]}
    if "tools" in chat:
        out["tools"] = chat["tools"]
    out["add_generation_prompt"] = True
    return out


def anthropic_error(status: int, message: str) -> JSON:
    """The error body Anthropic's API answers with for an HTTP ``status``."""
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


def anthropic_error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "api_error" if 500 <= status < 600 else "invalid_request_error"


def chat_to_anthropic(response: JSON, request: JSON) -> JSON:
    """A whole Chat Completions answer as an Anthropic message; ``request`` is the harness's."""
    choices = response.get("choices") if isinstance(response, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise TranslationError("the upstream answer has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[JSON] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or new_tool_id(),
                "name": function.get("name") or "",
                "input": tool_input(function.get("arguments")),
            }
        )
    stop_reason, stop_sequence = anthropic_stop(
        choice.get("finish_reason"),
        choice.get("stop_reason"),
        request,
        has_tool_use=any(block["type"] == "tool_use" for block in content),
    )
    usage = response.get("usage") or {}
    # Without a usage object, vLLM's capture fields still tell the counts.
    input_tokens = usage.get("prompt_tokens") or len(response.get("prompt_token_ids") or [])
    output_tokens = usage.get("completion_tokens") or len(choice.get("token_ids") or [])
    return {
        "id": message_id(response.get("id")),
        "type": "message",
        "role": "assistant",
        "model": request.get("model") or response.get("model"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def anthropic_stop(
    finish_reason: object, matched: object, request: JSON, *, has_tool_use: bool
) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence`` for a Chat Completions finish.

    ``matched`` is vLLM's ``stop_reason``: the stop string that ended the text, if any.
    Anthropic always reports ``tool_use`` when the message holds a tool call, whereas vLLM says
    ``stop`` when the call was forced by a named ``tool_choice``.
    """
    if finish_reason == "length":
        return "max_tokens", None
    if has_tool_use or finish_reason == "tool_calls":
        return "tool_use", None
    stops = request.get("stop_sequences") or []
    if finish_reason == "stop" and isinstance(matched, str) and matched in stops:
        return "stop_sequence", matched
    return "end_turn", None


def tool_input(arguments: object) -> Any:
    """A tool call's ``arguments`` string as Anthropic's ``input`` object.

    Arguments that are not a JSON object (a model may emit broken JSON) are kept verbatim under
    ``_raw`` rather than replaced by ``{}``: the harness then reports the bad call to the model.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw": arguments}


def message_id(upstream_id: object) -> str:
    """An Anthropic message id derived from the upstream's id (or fresh)."""
    return "msg_" + (upstream_id if isinstance(upstream_id, str) and upstream_id else _hex())


def new_tool_id() -> str:
    """A tool-use id for a call the upstream sent without one."""
    return "toolu_" + _hex()


def _hex() -> str:
    return uuid.uuid4().hex


def _chat_messages(body: JSON) -> list[JSON]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("'messages' must be a list", "messages")
    out: list[JSON] = []
    system = _system_text(body.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise TranslationError("each message must be an object", where)
        blocks = _blocks(message.get("content"), f"{where}.content")
        role = message.get("role")
        if role == "user":
            out += _user_messages(blocks)
        elif role == "assistant":
            out.append(_assistant_message(blocks))
        elif role == "system":
            # Not in Anthropic's API, but Claude Code sends mid-conversation system messages to
            # models it does not know; kept in place, as Chat Completions allows.
            text = _system_text([block for _, block in blocks])
            out.append({"role": "system", "content": text})
        else:
            raise TranslationError(
                f"unknown role {role!r}: expected user, assistant or system", where
            )
    return out


def _system_text(system: object) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, list):
        return "\n".join(_text_of(b, f"system.{i}") for i, b in enumerate(system))
    raise TranslationError("'system' must be a string or a list of text blocks", "system")


def _blocks(content: object, where: str) -> list[tuple[str, JSON]]:
    """A message's content as (location, block) pairs; a string is one text block."""
    if isinstance(content, str):
        return [(where, {"type": "text", "text": content})]
    if not isinstance(content, list):
        raise TranslationError("content must be a string or a list of blocks", where)
    out = []
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise TranslationError(
                "each content block must be an object with a type", f"{where}.{i}"
            )
        out.append((f"{where}.{i}", block))
    return out


def _user_messages(blocks: list[tuple[str, JSON]]) -> list[JSON]:
    # Tool results answer the previous assistant turn and must follow it directly, so they go
    # first; the user's own text and images follow in one message.
    tool_messages: list[JSON] = []
    parts: list[JSON] = []
    for at, block in blocks:
        kind = block["type"]
        if kind == "tool_result":
            use_id = block.get("tool_use_id")
            if not isinstance(use_id, str):
                raise TranslationError("a tool_result needs a tool_use_id", f"{at}.tool_use_id")
            result_blocks = block.get("content")
            result = [] if result_blocks is None else _blocks(result_blocks, f"{at}.content")
            texts = [_text_of(b, w) for w, b in result if b["type"] != "image"]
            tool_messages.append(
                {"role": "tool", "tool_call_id": use_id, "content": "\n".join(texts)}
            )
            # A tool message carries text only; images in a result reach the model with the
            # user message that follows.
            parts += [_image_part(b, w) for w, b in result if b["type"] == "image"]
        elif kind == "text":
            parts.append({"type": "text", "text": _text_of(block, at)})
        elif kind == "image":
            parts.append(_image_part(block, at))
        else:
            raise TranslationError(f"unsupported block type {kind!r} in a user message", at)
    if not parts:
        return tool_messages
    return [*tool_messages, {"role": "user", "content": _content(parts)}]


def _assistant_message(blocks: list[tuple[str, JSON]]) -> JSON:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[JSON] = []
    for at, block in blocks:
        kind = block["type"]
        if kind == "text":
            texts.append(_text_of(block, at))
        elif kind == "thinking":
            thinking.append(str(block.get("thinking") or ""))
        elif kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise TranslationError("a tool_use block needs a string id and name", at)
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        elif kind != "redacted_thinking":  # encrypted for Anthropic's models: useless upstream
            raise TranslationError(f"unsupported block type {kind!r} in an assistant message", at)
    message: JSON = {"role": "assistant", "content": "\n".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""  # chat templates expect text when there is no tool call
    if thinking:
        message |= reasoning_fields("\n".join(thinking))
    return message


def _content(parts: list[JSON]) -> str | list[JSON]:
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _text_of(block: object, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        raise TranslationError("expected a text block", where)
    text = block.get("text")
    if not isinstance(text, str):
        raise TranslationError("a text block needs a string 'text'", f"{where}.text")
    return text


def _image_part(block: JSON, where: str) -> JSON:
    source = block.get("source") or {}
    if source.get("type") == "base64" and source.get("media_type") and source.get("data"):
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise TranslationError("an image needs a base64 or url source", f"{where}.source")
    return {"type": "image_url", "image_url": {"url": url}}


def _chat_tools(tools: object) -> list[JSON]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TranslationError("'tools' must be a list", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise TranslationError("each tool must be an object", f"tools.{i}")
        if tool.get("type") not in (None, "custom"):
            continue  # Anthropic's server tools (web search, bash...) run on Anthropic's side
        if not isinstance(tool.get("name"), str):
            raise TranslationError("a tool needs a string name", f"tools.{i}.name")
        function: JSON = {"name": tool["name"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        function["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": function})
    return out


def _chat_tool_choice(choice: object) -> JSON:
    if choice is None:
        return {}
    if not isinstance(choice, dict):
        raise TranslationError("'tool_choice' must be an object", "tool_choice")
    kind = choice.get("type")
    out: JSON = {}
    if kind in _TOOL_CHOICES:
        out["tool_choice"] = _TOOL_CHOICES[kind]
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise TranslationError(f"unsupported tool_choice {choice!r}", "tool_choice")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out
