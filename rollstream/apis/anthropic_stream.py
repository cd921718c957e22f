"""A streamed Chat Completions answer as Anthropic Messages server-sent events, chunk by chunk.

Each upstream chunk is translated as it arrives; only the open block and the finish are
remembered. Capture fields (token ids, logprobs) are read for the usage but never forwarded.
"""

from __future__ import annotations

from typing import Any

from rollstream.apis.anthropic import (
    anthropic_error,
    anthropic_stop,
    message_id,
    new_tool_id,
)
from rollstream.apis.sse import SSEEvent

JSON = dict[str, Any]


def _event(data: JSON) -> SSEEvent:
    return SSEEvent(data, data["type"])


class AnthropicStreamTranslator:
    """Chat Completions stream chunks in, Anthropic ``/v1/messages`` stream events out.

    ``request`` is the harness's original Anthropic request: its model is echoed and its
    ``stop_sequences`` tell a matched stop string from an ordinary end of turn.
    """

    def __init__(self, request: JSON) -> None:
        self._request = request
        self._started = False
        self._done = False
        self._next_index = 0
        self._open: tuple[str, int] | None = None  # kind of the open block, tool index or -1
        self._open_index = -1
        self._tool_blocks: dict[int, int] = {}  # upstream tool call index -> block index
        self._finish_reason: object = None
        self._matched: object = None
        self._output_tokens: int | None = None
        self._token_ids_seen = 0

    def feed(self, chunk: JSON) -> list[SSEEvent]:
        """The events for one decoded upstream chunk (none once the stream has ended)."""
        if self._done:
            return []
        error = chunk.get("error")
        if isinstance(error, dict):  # vLLM reports a failure mid-stream as a chunk
            code = error.get("code")
            return self.error(code if isinstance(code, int) else 500, str(error.get("message")))
        events = self._start(chunk)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self._output_tokens = usage["completion_tokens"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:  # Anthropic has no n > 1
                events += self._choice(choice)
        return events

    def finish(self) -> list[SSEEvent]:
        """The closing events once the upstream is done; nothing if already finished."""
        if self._done:
            return []
        events = self._start({}) + self._close()
        self._done = True
        stop_reason, stop_sequence = anthropic_stop(
            self._finish_reason, self._matched, self._request, has_tool_use=bool(self._tool_blocks)
        )
        output_tokens = self._output_tokens
        if output_tokens is None:
            output_tokens = self._token_ids_seen
        events.append(
            _event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": {"output_tokens": output_tokens},
                }
            )
        )
        events.append(_event({"type": "message_stop"}))
        return events

    def error(self, status: int, message: str) -> list[SSEEvent]:
        """An ``error`` event for an upstream failure; the stream ends with it."""
        self._done = True
        return [SSEEvent(anthropic_error(status, message), "error")]

    def _start(self, chunk: JSON) -> list[SSEEvent]:
        if self._started:
            return []
        self._started = True
        prompt_ids = chunk.get("prompt_token_ids")
        message: JSON = {
            "id": message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self._request.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": len(prompt_ids) if isinstance(prompt_ids, list) else 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        return [_event({"type": "message_start", "message": message}), _event({"type": "ping"})]

    def _choice(self, choice: JSON) -> list[SSEEvent]:
        token_ids = choice.get("token_ids")
        if isinstance(token_ids, list):
            self._token_ids_seen += len(token_ids)
        if choice.get("finish_reason"):
            self._finish_reason = choice["finish_reason"]
            self._matched = choice.get("stop_reason")
        delta = choice.get("delta") or {}
        events: list[SSEEvent] = []
        thinking = delta.get("reasoning_content") or delta.get("reasoning")
        if thinking:
            events += self._switch(
                ("thinking", -1), {"type": "thinking", "thinking": "", "signature": ""}
            )
            events.append(self._delta({"type": "thinking_delta", "thinking": thinking}))
        if delta.get("content"):
            events += self._switch(("text", -1), {"type": "text", "text": ""})
            events.append(self._delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or []:
            events += self._tool_call(call)
        return events

    def _tool_call(self, call: JSON) -> list[SSEEvent]:
        k = call.get("index", 0)
        function = call.get("function") or {}
        events: list[SSEEvent] = []
        if k not in self._tool_blocks:
            block: JSON = {
                "type": "tool_use",
                "id": call.get("id") or new_tool_id(),
                "name": function.get("name") or "",
                "input": {},
            }
            events += self._switch(("tool", k), block)
            self._tool_blocks[k] = self._open_index
        fragment = function.get("arguments")
        if fragment:
            # vLLM streams calls one after another; a fragment for an earlier call is sent to
            # that call's block rather than dropped.
            index = self._tool_blocks[k]
            events.append(
                self._delta({"type": "input_json_delta", "partial_json": fragment}, index)
            )
        return events

    def _switch(self, kind: tuple[str, int], block: JSON) -> list[SSEEvent]:
        """Close the open block unless it is ``kind``, then open a ``block`` of that kind."""
        if self._open == kind:
            return []
        events = self._close()
        self._open, self._open_index = kind, self._next_index
        self._next_index += 1
        start = {"type": "content_block_start", "index": self._open_index, "content_block": block}
        return [*events, _event(start)]

    def _close(self) -> list[SSEEvent]:
        if self._open is None:
            return []
        self._open = None
        return [_event({"type": "content_block_stop", "index": self._open_index})]

    def _delta(self, delta: JSON, index: int | None = None) -> SSEEvent:
        index = self._open_index if index is None else index
        return _event({"type": "content_block_delta", "index": index, "delta": delta})
