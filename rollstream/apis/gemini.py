"""Google's Gemini API (``generateContent``, spoken by Gemini CLI) to Chat Completions and back.

The model and whether the call streams are named by the path
(``/v1beta/models/{model}:streamGenerateContent?alt=sse``), not by the body. A request is a
list of ``contents`` (role ``user`` or ``model``) made of ``parts``; tool calls and their
results are ``functionCall`` and ``functionResponse`` parts, linked by an optional ``id``.
Answers live in :mod:`gemini_answer` (whole) and :mod:`gemini_stream`; the tool and sampling
settings in :mod:`gemini_config`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from rollstream.apis.errors import TranslationError
from rollstream.apis.gemini_config import chat_settings, chat_tools
from rollstream.models.family import reasoning_fields

JSON = dict[str, Any]

GENERATE = "generateContent"
STREAM_GENERATE = "streamGenerateContent"
COUNT_TOKENS = "countTokens"
# A base URL with or without a version; model names may hold "/" (the SDK does not escape it).
_PATH = re.compile(
    r"^(?:/v1(?:alpha|beta)?)?/models/(?P<model>[^:?]+):(?P<action>"
    + "|".join((GENERATE, STREAM_GENERATE, COUNT_TOKENS))
    + r")/?$"
)
_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# The keys that make a part say something; executableCode and codeExecutionResult (Google-side
# code execution) only to be refused.
_DATA_KEYS = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)


# --- paths --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GeminiPath:
    """What a Gemini API path names: the model, the action, and whether it asks for SSE."""

    model: str
    action: str
    sse: bool

    @property
    def stream(self) -> bool:
        """Whether the action is ``streamGenerateContent``."""
        return self.action == STREAM_GENERATE


def gemini_path(path: str) -> GeminiPath | None:
    """The Gemini API call a request path names, or None for any other path."""
    bare, _, query = path.partition("?")
    match = _PATH.match(bare)
    if match is None:
        return None
    sse = any(unquote(pair) == "alt=sse" for pair in query.split("&"))
    return GeminiPath(unquote(match["model"]), match["action"], sse)


def gemini_count_tokens_path(path: str) -> bool:
    """Whether the path is Gemini's ``models/{model}:countTokens``."""
    parsed = gemini_path(path)
    return parsed is not None and parsed.action == COUNT_TOKENS


def gemini_harness_request(body: JSON, model: str) -> JSON:
    """The harness's request with the model its path named as ``model`` (the record needs it).

    Gemini's ``GenerateContentRequest`` has a ``model`` field of its own, which REST clients
    leave to the path; the body is not modified.
    """
    return {**body, "model": model}


# --- request: Gemini -> Chat Completions --------------------------------------------------


def gemini_to_chat(body: JSON, upstream_model: str, *, stream: bool = False) -> JSON:
    """A ``generateContent`` request as a Chat Completions request for ``upstream_model``.

    ``stream``: the path was ``streamGenerateContent``. Safety settings, thinking settings and
    labels are not forwarded; ``cachedContent`` (a server-side cache) and several candidates
    are refused with :class:`TranslationError`.
    """
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    if body.get("cachedContent"):
        raise TranslationError(
            "cachedContent is not supported: send the whole conversation in 'contents'",
            "cachedContent",
        )
    messages: list[JSON] = []
    system = _system_text(body.get("systemInstruction"))
    if system:
        messages.append({"role": "system", "content": system})
    messages += _messages(body.get("contents"))
    chat: JSON = {"model": upstream_model, "messages": messages}
    chat.update(chat_tools(body.get("tools"), body.get("toolConfig")))
    chat.update(chat_settings(body.get("generationConfig")))
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def gemini_count_tokens_request(body: JSON, upstream_model: str) -> JSON:
    """A ``countTokens`` body as a vLLM ``/tokenize`` body for the same prompt.

    The body holds ``contents``, or a whole ``generateContentRequest`` (with tools and system
    instruction, which count too).
    """
    if not isinstance(body, dict):
        raise TranslationError("the request body must be a JSON object")
    inner = body.get("generateContentRequest")
    if inner is None:
        inner = body
    elif not isinstance(inner, dict):
        raise TranslationError("generateContentRequest must be an object", "generateContentRequest")
    chat = gemini_to_chat(inner, upstream_model)
    out: JSON = {"model": upstream_model, "messages": chat["messages"]}
    if "tools" in chat:
        out["tools"] = chat["tools"]
    out["add_generation_prompt"] = True
    return out


def gemini_count_tokens_answer(count: int) -> JSON:
    """Gemini's ``countTokens`` answer for the upstream tokenizer's ``count``."""
    return {"totalTokens": count}


def _system_text(system: object) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, dict):
        raise TranslationError(
            "systemInstruction must be a Content or a string", "systemInstruction"
        )
    texts = []
    for at, part in _parts(system.get("parts"), "systemInstruction.parts"):
        if not isinstance(part.get("text"), str):
            raise TranslationError("systemInstruction may hold text parts only", at)
        texts.append(part["text"])
    return "\n".join(texts)


def _parts(parts: object, where: str) -> list[tuple[str, JSON]]:
    """A content's parts as (location, part) pairs, parts without data left out."""
    if parts is None:
        return []
    if not isinstance(parts, list):
        raise TranslationError("parts must be a list", where)
    out = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise TranslationError("each part must be an object", f"{where}.{i}")
        # A part holding only a thoughtSignature or metadata says nothing to the model.
        if any(key in part for key in _DATA_KEYS):
            out.append((f"{where}.{i}", part))
    return out


def _messages(contents: object) -> list[JSON]:
    if not isinstance(contents, list):
        raise TranslationError("'contents' must be a list", "contents")
    out: list[JSON] = []
    # The calls of the latest model turn that no functionResponse has answered yet.
    pending: list[tuple[str, str]] = []
    for i, content in enumerate(contents):
        where = f"contents.{i}"
        if not isinstance(content, dict):
            raise TranslationError("each content must be an object", where)
        parts = _parts(content.get("parts"), f"{where}.parts")
        role = content.get("role") or "user"
        if role == "model":
            message, pending = _assistant_message(parts, i)
            out.append(message)
        elif role in ("user", "function"):  # "function": the API's earlier role for results
            out += _user_messages(parts, i, pending)
        else:
            raise TranslationError(f"unknown role {role!r}: expected user or model", where)
    return out


def _assistant_message(parts: list[tuple[str, JSON]], index: int) -> tuple[JSON, list[Any]]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[JSON] = []
    for j, (at, part) in enumerate(parts):
        if "functionCall" in part:
            call = part["functionCall"]
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise TranslationError("a functionCall needs a string name", f"{at}.functionCall")
            args = call.get("args")
            if args is not None and not isinstance(args, dict):
                raise TranslationError("functionCall args must be an object", f"{at}.functionCall")
            calls.append(
                {
                    "id": _call_id(call.get("id"), index, j),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": json.dumps(args or {}, ensure_ascii=False),
                    },
                }
            )
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") else texts).append(part["text"])
        else:
            raise TranslationError("a model turn may hold text and functionCall parts only", at)
    # Consecutive text parts of a model turn are pieces of one text (a stream's deltas).
    message: JSON = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""  # chat templates expect text when there is no tool call
    if thoughts:
        message |= reasoning_fields("".join(thoughts))
    pending = [(c["id"], c["function"]["name"]) for c in calls]
    return message, pending


def _user_messages(
    parts: list[tuple[str, JSON]], index: int, pending: list[tuple[str, str]]
) -> list[JSON]:
    # Tool results answer the previous model turn and must follow it directly, so they go
    # first; the user's own text and images follow in one message.
    tool_messages: list[JSON] = []
    chat_parts: list[JSON] = []
    for j, (at, part) in enumerate(parts):
        if "functionResponse" in part:
            result = part["functionResponse"]
            if not isinstance(result, dict) or not isinstance(result.get("name"), str):
                raise TranslationError(
                    "a functionResponse needs a string name", f"{at}.functionResponse"
                )
            tool_messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _answered_id(result, pending, index, j),
                    "content": _result_text(result.get("response")),
                }
            )
            # A tool message carries text only; images in a result reach the model with the
            # user message that follows.
            nested = _parts(result.get("parts"), f"{at}.functionResponse.parts")
            chat_parts += [_media_part(p, w) for w, p in nested]
        elif isinstance(part.get("text"), str):
            if not part.get("thought"):
                chat_parts.append({"type": "text", "text": part["text"]})
        elif "inlineData" in part or "fileData" in part:
            chat_parts.append(_media_part(part, at))
        else:
            raise TranslationError(
                "a user turn may hold text, inlineData, fileData and functionResponse parts only",
                at,
            )
    if not chat_parts and tool_messages:
        return tool_messages
    if all(p["type"] == "text" for p in chat_parts):
        content: str | list[JSON] = "\n".join(p["text"] for p in chat_parts)
    else:
        content = chat_parts
    return [*tool_messages, {"role": "user", "content": content}]


def _call_id(given: object, content_index: int, part_index: int) -> str:
    """The call's own id, or one derived from its place: the same history, the same ids."""
    if isinstance(given, str) and given:
        return given
    return f"call_{content_index}_{part_index}"


def _answered_id(
    result: JSON, pending: list[tuple[str, str]], content_index: int, part_index: int
) -> str:
    """The id of the call a functionResponse answers, and that call marked answered.

    The call with its id when there is one; else (no id, or an id no call has, as when the
    client named a call that came without one) the earliest unanswered call of the same name
    in the preceding model turn; else an id derived from its place.
    """
    given = result.get("id")
    if isinstance(given, str) and given:
        for k, (call_id, _) in enumerate(pending):
            if call_id == given:
                del pending[k]
                return call_id
    for k, (call_id, name) in enumerate(pending):
        if name == result["name"]:
            del pending[k]
            return call_id
    return _call_id(given, content_index, part_index)


def _result_text(response: object) -> str:
    """A functionResponse's ``response`` as tool message text: Gemini CLI's output as is."""
    if isinstance(response, dict) and set(response) == {"output"}:
        output = response["output"]
        if isinstance(output, str):
            return output
    if response is None:
        return ""
    return json.dumps(response, ensure_ascii=False)


def _media_part(part: JSON, where: str) -> JSON:
    """An ``inlineData`` or ``fileData`` image as a Chat ``image_url`` part."""
    inline, file = part.get("inlineData"), part.get("fileData")
    if isinstance(inline, dict):
        mime, data = inline.get("mimeType"), inline.get("data")
        if isinstance(mime, str) and mime.startswith("image/") and isinstance(data, str):
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
        raise TranslationError(
            f"inlineData of type {mime!r} is not supported: images only", f"{where}.inlineData"
        )
    if isinstance(file, dict):
        mime, uri = file.get("mimeType"), file.get("fileUri")
        image = isinstance(mime, str) and mime.startswith("image/")
        if image and isinstance(uri, str) and uri.startswith(("http://", "https://")):
            return {"type": "image_url", "image_url": {"url": uri}}
        raise TranslationError(
            "fileData is supported for images at an http(s) URL only", f"{where}.fileData"
        )
    raise TranslationError("expected an inlineData or fileData part", where)


# --- errors -------------------------------------------------------------------------------


def gemini_error(status: int, message: str) -> JSON:
    """Google's error body, ``{"error": {code, message, status}}``, for an HTTP status."""
    return {"error": {"code": status, "message": message, "status": gemini_status(status)}}


def gemini_status(status: int) -> str:
    """The ``google.rpc`` status name Google's APIs answer an HTTP status with."""
    if status in _STATUSES:
        return _STATUSES[status]
    if 400 <= status < 500:
        return "INVALID_ARGUMENT"
    return "INTERNAL" if status >= 500 else "UNKNOWN"
