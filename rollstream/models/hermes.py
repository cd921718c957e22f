"""Hermes-style tool-call parsing, as vLLM's ``hermes`` parser does it.

The model's sampled text holds ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks;
the server returns the text before the first block as content and each block as a tool call.
Token ids are not touched: they stay the raw sampled tokens.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

START = "<tool_call>"
END = "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(?!.*<tool_call>)(.*)", re.DOTALL)


def new_tool_call_id() -> str:
    """An id in vLLM's style."""
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the function name and its arguments as a JSON string."""

    name: str
    arguments: str
    id: str = field(default_factory=new_tool_call_id)

    def to_openai(self) -> dict[str, object]:
        """The ``message.tool_calls[]`` entry."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ParsedOutput:
    """Content and tool calls of one completion."""

    content: str | None
    tool_calls: list[ToolCall]


def parse_block(body: str) -> ToolCall | None:
    """One block's JSON to a ToolCall; None if it is not ``{"name": str, "arguments": ...}``."""
    try:
        obj = json.loads(body.strip())
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    return ToolCall(obj["name"], json.dumps(arguments, ensure_ascii=False))


def parse_tool_calls(text: str) -> ParsedOutput:
    """Split a completion's text into content and tool calls.

    As in vLLM, a completion with any malformed block is returned whole as content (no tool
    calls), so nothing the model said is lost.
    """
    if START not in text:
        return ParsedOutput(text, [])
    calls = []
    for match in _BLOCK.finditer(text):
        call = parse_block(match.group(1) if match.group(1) is not None else match.group(2))
        if call is None:
            return ParsedOutput(text, [])
        calls.append(call)
    content = text[: text.index(START)]
    return ParsedOutput(content or None, calls)
