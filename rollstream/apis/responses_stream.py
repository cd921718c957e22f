"""A streamed Chat Completions answer as Responses API server-sent events.

Chat streams one assistant message as deltas; Responses streams output items, each opened,
filled and closed. Reasoning, text and each tool call become items in the order they appear;
at most one is open at a time, since the upstream finishes one before starting the next.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rollstream.apis.errors import TranslationError
from rollstream.apis.responses import JSON, namespaces
from rollstream.apis.responses_answer import (
    function_call_item,
    message_item,
    new_id,
    reasoning_item,
    response_object,
    response_usage,
    text_part,
)
from rollstream.apis.sse import SSEEvent


@dataclass
class _Item:
    """The output item being streamed."""

    kind: str  # "message", "reasoning" or "function_call"
    item_id: str
    output_index: int
    text: list[str] = field(default_factory=list)  # text, reasoning or argument pieces
    call_id: str = ""
    name: str = ""
    call_index: int | None = None  # the upstream tool call index


class ResponsesStreamTranslator:
    """Turns the chunks of one streamed Chat Completions answer into Responses events.

    Feed each decoded chunk to :meth:`feed`, then call :meth:`finish` when the upstream ends,
    or :meth:`error` when it breaks; each returns the events to send, in order. Sequence numbers
    run from 0 across the whole stream. Capture fields in the chunks are never copied.
    """

    def __init__(self, request: dict[str, Any]) -> None:
        self._request = request
        self._namespaces = namespaces(request)
        self._id = new_id("resp")
        self._created_at = int(time.time())
        self._events: list[SSEEvent] = []
        self._sequence = 0
        self._started = False
        self._done = False
        self._output: list[JSON] = []  # closed items, in output_index order
        self._open: _Item | None = None
        self._calls_seen: set[int] = set()
        self._finish_reason: str | None = None
        self._usage: JSON | None = None

    def feed(self, chunk: dict[str, Any]) -> list[SSEEvent]:
        """The events for one Chat Completions stream chunk (JSON-decoded)."""
        if self._done:
            return []
        self._start()
        if isinstance(chunk.get("usage"), dict):
            self._usage = response_usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue  # one answer per request (n=1)
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._reasoning_delta(reasoning)
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._text_delta(delta["content"])
            for call in delta.get("tool_calls") or []:
                self._tool_call_delta(call)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]
        return self._drain()

    def finish(self) -> list[SSEEvent]:
        """The upstream ended: close the open item, then ``response.completed``.

        ``response.incomplete`` instead when the answer was cut at the token limit. A second
        call returns nothing.
        """
        if self._done:
            return []
        self._start()
        self._close()
        self._done = True
        status = "incomplete" if self._finish_reason == "length" else "completed"
        self._emit(f"response.{status}", response=self._response(status, self._usage))
        return self._drain()

    def error(self, status: int, message: str) -> list[SSEEvent]:
        """The upstream broke mid-stream (HTTP ``status``): a well-formed ``response.failed``."""
        if self._done:
            return []
        self._start()
        self._done = True
        if status == 429:
            code = "rate_limit_exceeded"
        elif 400 <= status < 500:
            code = "invalid_request"
        else:
            code = "server_error"
        error = {"code": code, "message": message}
        self._emit("response.failed", response=self._response("failed", self._usage, error))
        return self._drain()

    # --- items ------------------------------------------------------------------------------

    def _reasoning_delta(self, text: str) -> None:
        item = self._ensure_open("reasoning")
        item.text.append(text)
        self._emit(
            "response.reasoning_summary_text.delta",
            item_id=item.item_id,
            output_index=item.output_index,
            summary_index=0,
            delta=text,
        )

    def _text_delta(self, text: str) -> None:
        item = self._ensure_open("message")
        item.text.append(text)
        self._emit(
            "response.output_text.delta",
            item_id=item.item_id,
            output_index=item.output_index,
            content_index=0,
            delta=text,
        )

    def _tool_call_delta(self, call: JSON) -> None:
        index = int(call.get("index", 0))
        function = call.get("function") or {}
        item = self._open
        if item is None or item.kind != "function_call" or item.call_index != index:
            if index in self._calls_seen:
                # Its item is closed already; Chat servers send each call's deltas together.
                raise TranslationError(f"tool call {index} resumed after another began")
            self._calls_seen.add(index)
            item = self._open_item("function_call", call_index=index, call=call)
        elif function.get("name"):
            item.name += function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.text.append(arguments)
            self._emit(
                "response.function_call_arguments.delta",
                item_id=item.item_id,
                output_index=item.output_index,
                delta=arguments,
            )

    def _ensure_open(self, kind: str) -> _Item:
        if self._open is not None and self._open.kind == kind:
            return self._open
        return self._open_item(kind)

    def _open_item(
        self, kind: str, call_index: int | None = None, call: JSON | None = None
    ) -> _Item:
        self._close()
        prefix = {"message": "msg", "reasoning": "rs", "function_call": "fc"}[kind]
        item = _Item(kind, new_id(prefix), len(self._output), call_index=call_index)
        self._open = item
        if kind == "message":
            added: JSON = {
                "type": "message",
                "id": item.item_id,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
        elif kind == "reasoning":
            added = {"type": "reasoning", "id": item.item_id, "summary": []}
        else:
            call = call or {}
            item.call_id = call.get("id") or new_id("call")
            item.name = (call.get("function") or {}).get("name") or ""
            added = function_call_item(
                item.item_id,
                item.call_id,
                item.name,
                "",
                "in_progress",
                self._namespaces.get(item.name),
            )
        self._emit("response.output_item.added", output_index=item.output_index, item=added)
        if kind == "message":
            self._emit(
                "response.content_part.added",
                item_id=item.item_id,
                output_index=item.output_index,
                content_index=0,
                part=text_part(""),
            )
        return item

    def _close(self) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        text = "".join(item.text)
        where: JSON = {"item_id": item.item_id, "output_index": item.output_index}
        if item.kind == "message":
            self._emit("response.output_text.done", **where, content_index=0, text=text)
            self._emit("response.content_part.done", **where, content_index=0, part=text_part(text))
            done = message_item(item.item_id, text, "completed")
        elif item.kind == "reasoning":
            self._emit("response.reasoning_summary_text.done", **where, summary_index=0, text=text)
            done = reasoning_item(item.item_id, text)
        else:
            self._emit("response.function_call_arguments.done", **where, arguments=text)
            done = function_call_item(
                item.item_id,
                item.call_id,
                item.name,
                text,
                "completed",
                self._namespaces.get(item.name),
            )
        self._output.append(done)
        self._emit("response.output_item.done", output_index=item.output_index, item=done)

    # --- events -----------------------------------------------------------------------------

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        for kind in ("response.created", "response.in_progress"):
            self._emit(kind, response=self._response("in_progress", None))

    def _response(self, status: str, usage: JSON | None, error: JSON | None = None) -> JSON:
        return response_object(
            self._request,
            response_id=self._id,
            created_at=self._created_at,
            status=status,
            output=list(self._output),
            usage=usage,
            error=error,
        )

    def _emit(self, kind: str, **fields: Any) -> None:
        data: JSON = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        self._events.append(SSEEvent(data, kind))

    def _drain(self) -> list[SSEEvent]:
        events, self._events = self._events, []
        return events
