"""The OpenAI Responses API (``/v1/responses``, spoken by Codex) to Chat Completions and back.

A Responses request is a list of items (messages, function calls, their outputs, reasoning);
Chat Completions wants messages. The answer goes the other way (:mod:`responses_answer`, and
:mod:`responses_stream` for a stream): one assistant message becomes a list of output items.
"""

from __future__ import annotations

from typing import Any

from rollstream.apis.errors import TranslationError
from rollstream.models.family import reasoning_fields

JSON = dict[str, Any]

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


# --- request: Responses -> Chat Completions ---------------------------------------------------


def responses_to_chat(body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    """The Chat Completions request for a Responses request, addressed to ``upstream_model``.

    Only fields with a Chat Completions meaning are forwarded; everything else (``store``,
    ``include``, ``reasoning``, ``text``, ``metadata``, ...) is dropped. Raises
    :class:`TranslationError` for input that cannot be expressed as chat messages.
    """
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    if body.get("previous_response_id") is not None:
        raise TranslationError(
            "previous_response_id is not supported: this proxy does not store responses; "
            "send the whole conversation in 'input'",
            "previous_response_id",
        )
    messages: list[JSON] = []
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise TranslationError("'instructions' must be a string", "instructions")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    messages += _input_messages(body.get("input"))

    chat: JSON = {"model": upstream_model, "messages": messages}
    tools = _tools(body.get("tools"))
    if tools:
        # Tool settings without tools are rejected by some servers, so they travel together.
        chat["tools"] = tools
        if "tool_choice" in body:
            chat["tool_choice"] = _tool_choice(body["tool_choice"])
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _input_messages(items: Any) -> list[JSON]:
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise TranslationError("'input' must be a string or a list of items", "input")
    messages: list[JSON] = []
    # The assistant message that function_call items directly after it join (parallel calls).
    open_assistant: JSON | None = None
    # Reasoning waits for the assistant turn it preceded; Chat carries it on that message.
    reasoning: list[str] = []
    for i, item in enumerate(items):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise TranslationError(f"{param} must be an object", param)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "function_call":
            call = _tool_call(item, param)
            if open_assistant is None:
                open_assistant = _assistant(None, reasoning)
                messages.append(open_assistant)
            open_assistant.setdefault("tool_calls", []).append(call)
            continue
        open_assistant = None
        if kind == "message":
            role = _ROLES.get(str(item.get("role")))
            if role is None:
                raise TranslationError(f"{param} has an unknown role {item.get('role')!r}", param)
            content = _content(item.get("content"), f"{param}.content")
            if role == "assistant":
                open_assistant = _assistant(content, reasoning)
                messages.append(open_assistant)
            else:
                messages.append({"role": role, "content": content})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _string(item, "call_id", param),
                    "content": _tool_output(item.get("output"), param),
                }
            )
        elif kind == "reasoning":
            text = _reasoning_text(item)
            if text:
                reasoning.append(text)
        else:
            raise TranslationError(f"{param}: input item type {kind!r} is not supported", param)
    return messages


def _assistant(content: str | list[JSON] | None, reasoning: list[str]) -> JSON:
    message: JSON = {"role": "assistant", "content": content}
    if reasoning:
        message |= reasoning_fields("\n".join(reasoning))
        reasoning.clear()
    return message


def _tool_call(item: JSON, param: str) -> JSON:
    return {
        "id": _string(item, "call_id", param),
        "type": "function",
        "function": {
            "name": _string(item, "name", param),
            "arguments": _string(item, "arguments", param),
        },
    }


def _string(item: JSON, key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise TranslationError(f"{param}.{key} must be a string", f"{param}.{key}")
    return value


def _content(content: Any, param: str) -> str | list[JSON]:
    """Content at ``param``: a string when it is all text, else a list of Chat parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TranslationError(f"{param} must be a string or a list of parts", param)
    parts: list[JSON] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS or kind == "refusal":
            text = part.get("refusal" if kind == "refusal" else "text")
            if not isinstance(text, str):
                raise TranslationError(f"{where} has no text", where)
            if parts and parts[-1]["type"] == "text":
                parts[-1]["text"] += "\n" + text
            else:
                parts.append({"type": "text", "text": text})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            # file_id images and input_file need the OpenAI file store, which vLLM lacks.
            raise TranslationError(f"{where}: content part {kind!r} is not supported", where)
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)  # at most one part: consecutive text merged
    return parts


def _tool_output(output: Any, param: str) -> str:
    content = _content(output, f"{param}.output")
    if isinstance(content, str):
        return content
    # A tool message carries text only; images belong in a user message.
    raise TranslationError(f"{param}.output must be a string or text parts", f"{param}.output")


def _reasoning_text(item: JSON) -> str:
    summary = [
        p["text"]
        for p in item.get("summary") or []
        if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]
    if not summary:  # some clients send the full reasoning as content instead
        summary = [
            p["text"]
            for p in item.get("content") or []
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    return "\n".join(summary)


def _tools(tools: Any) -> list[JSON]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise TranslationError("'tools' must be a list", "tools")
    out: list[JSON] = []
    for param, tool, _ in _functions(tools):
        function: JSON = {"name": _string(tool, "name", param)}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": function})
    names = [t["function"]["name"] for t in out]
    if len(set(names)) < len(names):
        # A call names its function only: the answer could not say which one was meant.
        twice = sorted({n for n in names if names.count(n) > 1})
        raise TranslationError(f"tool names must be unique across namespaces: {twice}", "tools")
    return out


def _functions(tools: list[Any]) -> list[tuple[str, JSON, str | None]]:
    """The function tools of a request, a ``namespace`` group's among them.

    Each as (where it is, the tool, its namespace or None). Hosted tools (web_search,
    file_search, local_shell, custom, image_generation, ...) run on OpenAI's side or need a
    grammar; a vLLM function-calling model serves none of them. A namespace groups functions
    (Codex's ``multi_agent_v1``: spawn_agent, wait_agent, ...); Chat has none, so its functions
    go up as plain ones and the answer names their namespace again.
    """
    found: list[tuple[str, JSON, str | None]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            found.append((f"tools[{i}]", tool, None))
        elif tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            space = _string(tool, "name", f"tools[{i}]")
            for j, inner in enumerate(tool["tools"]):
                if isinstance(inner, dict) and inner.get("type", "function") == "function":
                    found.append((f"tools[{i}].tools[{j}]", inner, space))
    return found


def namespaces(request: Any) -> dict[str, str]:
    """Function name -> its namespace, for the functions a Responses request groups in one."""
    tools = request.get("tools") if isinstance(request, dict) else None
    if not isinstance(tools, list):
        return {}
    return {
        tool["name"]: space
        for _, tool, space in _functions(tools)
        if space is not None and isinstance(tool.get("name"), str)
    }


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("name"), str)
    ):
        return {"type": "function", "function": {"name": choice["name"]}}
    return "auto"  # allowed_tools, hosted tool choices: let the model decide among what it has


# --- errors -----------------------------------------------------------------------------------

_ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}


def responses_error(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """An OpenAI error body, ``{"error": {message, type, param, code}}``, for an HTTP status."""
    kind = "server_error" if status >= 500 else _ERROR_TYPES.get(status, "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}
