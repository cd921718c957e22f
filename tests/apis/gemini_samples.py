"""Gemini request pieces shared by the Gemini translator tests."""

from __future__ import annotations

import json
from typing import Any

from rollstream.apis.gemini import gemini_to_chat

JSON = dict[str, Any]
UPSTREAM = "Qwen/Qwen3-8B"
FUNCTIONS = [{"functionDeclarations": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}]


def user(*parts: JSON) -> JSON:
    return {"role": "user", "parts": list(parts)}


def model(*parts: JSON) -> JSON:
    return {"role": "model", "parts": list(parts)}


def text(value: str, **extra: Any) -> JSON:
    return {"text": value, **extra}


def call(name: str, args: JSON, call_id: str | None = None) -> JSON:
    body: JSON = {"name": name, "args": args}
    if call_id is not None:
        body["id"] = call_id
    return {"functionCall": body}


def result(name: str, response: Any, call_id: str | None = None) -> JSON:
    body: JSON = {"name": name, "response": response}
    if call_id is not None:
        body["id"] = call_id
    return {"functionResponse": body}


def chat(contents: list[JSON], **extra: Any) -> JSON:
    return gemini_to_chat({"contents": contents, **extra}, UPSTREAM)


def messages(contents: list[JSON], **extra: Any) -> list[JSON]:
    out: list[JSON] = chat(contents, **extra)["messages"]
    return out


def tool_call(call_id: str, name: str, args: JSON) -> JSON:
    arguments = json.dumps(args, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
