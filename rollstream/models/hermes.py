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


@dataclass
class StreamDelta:
    """What one step of streaming produced: content text and/or tool-call deltas."""

    content: str = ""
    tool_calls: list[dict[str, object]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.tool_calls)


class StreamingToolParser:
    """The streaming counterpart of :func:`parse_tool_calls`.

    Content is passed through as it arrives, except a tail that could be the start of
    ``<tool_call>``; a block is held until it closes, then sent as two deltas (id and name,
    then the arguments), the way vLLM streams ``delta.tool_calls``. A block that does not parse
    is sent as content.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._inside = False
        self.calls: list[ToolCall] = []

    def feed(self, text: str) -> StreamDelta:
        """Consume the next piece of generated text."""
        self._buffer += text
        delta = StreamDelta()
        while True:
            if not self._inside:
                start = self._buffer.find(START)
                if start < 0:
                    keep = _partial_suffix(self._buffer, START)
                    if not self.calls:  # text after the first call is dropped, as unstreamed
                        delta.content += self._buffer[: len(self._buffer) - keep]
                    self._buffer = self._buffer[len(self._buffer) - keep :]
                    return delta
                if not self.calls:
                    delta.content += self._buffer[:start]
                self._buffer = self._buffer[start + len(START) :]
                self._inside = True
            end = self._buffer.find(END)
            if end < 0:
                return delta
            self._close(self._buffer[:end], delta)
            self._buffer = self._buffer[end + len(END) :]
            self._inside = False

    def finish(self) -> StreamDelta:
        """End of generation: an unclosed block is parsed if it can be, else sent as content."""
        delta = StreamDelta()
        if self._inside:
            self._close(self._buffer, delta)
        elif not self.calls:
            delta.content += self._buffer
        self._buffer = ""
        self._inside = False
        return delta

    def _close(self, body: str, delta: StreamDelta) -> None:
        call = parse_block(body)
        if call is None:
            delta.content += START + body + END
            return
        index = len(self.calls)
        self.calls.append(call)
        delta.tool_calls += [
            {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            },
            {"index": index, "function": {"arguments": call.arguments}},
        ]


def _partial_suffix(text: str, token: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``token``."""
    for n in range(min(len(token) - 1, len(text)), 0, -1):
        if text.endswith(token[:n]):
            return n
    return 0
