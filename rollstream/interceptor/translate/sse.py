"""Server-sent events: parse an upstream byte stream, encode events for the harness."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollstream import jsonfast

DONE = "[DONE]"


@dataclass(frozen=True)
class SSEEvent:
    """One event: an optional name and its data (a JSON object, or a string such as [DONE])."""

    data: dict[str, Any] | str
    event: str | None = None

    def encode(self) -> bytes:
        """Wire form: ``event: NAME`` (if named), ``data: JSON``, blank line."""
        payload = self.data.encode() if isinstance(self.data, str) else jsonfast.dumps(self.data)
        head = b"event: " + self.event.encode() + b"\n" if self.event else b""
        return head + b"data: " + payload + b"\n\n"


class SSEParser:
    """Incremental parser: feed bytes as they arrive, get complete events.

    Buffers only up to the end of the current event. Lines ``data:`` are joined with newlines,
    ``event:`` names the event, comments (``:``) and other fields are ignored; CRLF and
    LF line endings both work. Data that is not JSON is returned as a string.
    """

    def __init__(self) -> None:
        self._buffer = b""
        # Where to resume looking for the end of the event: a large event (vLLM's first chunk
        # carries the whole prompt's token ids) arrives in many reads, and re-scanning it
        # from its start on each read would be quadratic.
        self._scanned = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events they completed."""
        self._buffer += chunk
        events: list[SSEEvent] = []
        while True:
            end, sep_len = _event_end(self._buffer, self._scanned)
            if end < 0:
                self._scanned = max(0, len(self._buffer) - 3)  # a separator may straddle reads
                return events
            self._scanned = 0
            block, self._buffer = self._buffer[:end], self._buffer[end + sep_len :]
            event = _parse_block(block)
            if event is not None:
                events.append(event)

    def flush(self) -> list[SSEEvent]:
        """An event left unterminated at the end of the stream, if any."""
        block, self._buffer, self._scanned = self._buffer, b"", 0
        event = _parse_block(block) if block.strip() else None
        return [event] if event is not None else []


def _event_end(buffer: bytes, start: int) -> tuple[int, int]:
    candidates = [(buffer.find(sep, start), len(sep)) for sep in (b"\r\n\r\n", b"\n\n", b"\r\r")]
    found = [(i, n) for i, n in candidates if i >= 0]
    return min(found) if found else (-1, 0)


def _parse_block(block: bytes) -> SSEEvent | None:
    name: str | None = None
    data: list[bytes] = []
    for line in block.splitlines():
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    if not data:
        return None
    raw = b"\n".join(data)
    try:
        parsed = jsonfast.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return SSEEvent(parsed, name)
    return SSEEvent(raw.decode("utf-8", "replace"), name)
