"""Server-sent events: parse an upstream byte stream, encode events for the harness."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from rollstream.schemas import jsonfast

DONE = "[DONE]"
_DONE_BYTES = DONE.encode()


@dataclass(slots=True)
class SSEEvent:
    """One event: an optional name and its data (a JSON object, or a string such as [DONE]).

    ``token_ids``: the list a parser made with ``SSEParser(take_ids=key)`` took out of the data
    (the data has no ``key`` then), as packed little-endian uint32.
    """

    data: dict[str, Any] | str
    event: str | None = None
    token_ids: bytes | None = None

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

    ``take_ids``: a top-level key of the data objects holding a list of uint32 (vLLM's
    ``prompt_token_ids``) that is parsed straight into packed bytes (``SSEEvent.token_ids``)
    where :func:`jsonfast.loads_taking_ids` can, instead of into a list in ``data``.
    """

    def __init__(self, take_ids: str | None = None) -> None:
        self._buffer = b""
        # Where to resume looking for the end of the event: a large event (vLLM's first chunk
        # carries the whole prompt's token ids) arrives in many reads, and re-scanning it
        # from its start on each read would be quadratic.
        self._scanned = 0
        self._take_ids = take_ids
        self._ids_marker = b'"' + take_ids.encode() + b'"' if take_ids else None

    @property
    def idle(self) -> bool:
        """Nothing buffered: the next read starts an event (what :meth:`single` needs too)."""
        return not self._buffer

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events they completed."""
        parsed = self.single(chunk)
        if parsed is not None:
            return [SSEEvent(parsed)]
        return self.feed_general(chunk)

    def single(self, chunk: bytes) -> dict[str, Any] | None:
        """The JSON object of a read that is exactly one whole one-line ``data:`` event.

        None (and nothing consumed) for any other read: then the caller hands the read to
        :meth:`feed_general`. Where this gives an object, :meth:`feed` gives that one event.
        """
        # bytes.find, not ``in``: ``in`` first tries the operand as an integer and clears the
        # TypeError, which costs more than the search itself.
        if (
            not self._buffer
            and chunk.startswith(b"data: {")
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk.endswith(b"\n")
            and chunk.find(b"\r") < 0
            and (self._ids_marker is None or chunk.find(self._ids_marker) < 0)
        ):
            # The usual read of a stream: one whole event of one data line, a JSON object,
            # nothing buffered before it. The interceptor runs this for every read, and the
            # general parse costs three times as much; it gives the same event.
            try:
                parsed = orjson.loads(chunk[6:-2])
            except orjson.JSONDecodeError:
                return None
            if isinstance(parsed, dict):
                return parsed
        return None

    def feed_general(self, chunk: bytes) -> list[SSEEvent]:
        """:meth:`feed` without the one-event shortcut, for a read :meth:`single` declined."""
        self._buffer += chunk
        events: list[SSEEvent] = []
        while True:
            end, sep_len = _event_end(self._buffer, self._scanned)
            if end < 0:
                self._scanned = max(0, len(self._buffer) - 3)  # a separator may straddle reads
                return events
            self._scanned = 0
            block, self._buffer = self._buffer[:end], self._buffer[end + sep_len :]
            event = self._parse_block(block)
            if event is not None:
                events.append(event)
            if not self._buffer:  # the usual read: whole events, nothing left to look at
                return events

    def flush(self) -> list[SSEEvent]:
        """An event left unterminated at the end of the stream, if any."""
        block, self._buffer, self._scanned = self._buffer, b"", 0
        event = self._parse_block(block) if block.strip() else None
        return [event] if event is not None else []

    def _parse_block(self, block: bytes) -> SSEEvent | None:
        if block.startswith(b"data:") and block.find(b"\n") < 0 and block.find(b"\r") < 0:
            # One data line, by far the most common event: what the general parse gives.
            name, raw = None, block[6:] if block[5:6] == b" " else block[5:]
        else:
            fields = _fields(block)
            if fields is None:
                return None
            name, raw = fields
        if raw == _DONE_BYTES:
            return SSEEvent(DONE, name)  # no JSON parse (and its failure) for the last event
        if self._ids_marker is not None and raw.find(self._ids_marker) >= 0:
            assert self._take_ids is not None
            taken = jsonfast.loads_taking_ids(raw, self._take_ids)
            if taken is not None:
                return SSEEvent(taken[0], name, taken[1])
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            try:
                parsed = jsonfast.loads(raw)  # what only the standard library reads
            except ValueError:
                parsed = None
        if isinstance(parsed, dict):
            return SSEEvent(parsed, name)
        return SSEEvent(raw.decode("utf-8", "replace"), name)


def _event_end(buffer: bytes, start: int) -> tuple[int, int]:
    if buffer.find(b"\r", start) < 0:  # LF only (every separator found so far starts at start)
        end = buffer.find(b"\n\n", start)
        return (end, 2) if end >= 0 else (-1, 0)
    candidates = [(buffer.find(sep, start), len(sep)) for sep in (b"\r\n\r\n", b"\n\n", b"\r\r")]
    found = [(i, n) for i, n in candidates if i >= 0]
    return min(found) if found else (-1, 0)


def _fields(block: bytes) -> tuple[str | None, bytes] | None:
    """The event name and the joined data lines of a block; None when it has no data."""
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
    return name, b"\n".join(data)
