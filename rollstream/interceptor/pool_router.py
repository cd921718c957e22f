"""The pool's one proxy address: each connection relayed, whole, to the worker of its session.

Harnesses the node launches are pointed straight at their worker; this router is for the
others, which know one address. It reads the head of a connection's first request (nothing is
lost: what was read is sent on first), takes the session from it as the interceptor itself does
(``sessions.session_of``: API key, session header or ``/s/{id}/`` path) and relays the
connection both ways to that session's worker, bytes untouched.

One connection carries one session: later requests on a kept-alive connection go to the worker
the first one chose. That holds for every harness SDK (one client, one key). A connection whose
first request names no session (a forward-mode CONNECT: the key is inside TLS) goes to worker 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

from rollstream.interceptor.sessions import session_of
from rollstream.streams import splice

log = logging.getLogger(__name__)

#: Bytes read looking for the end of the first request's head; beyond, what was read is used.
MAX_HEAD_BYTES = 64 * 1024
_END = b"\r\n\r\n"

#: The worker for a session (None: the first request named none): index, host, port.
Pick = Callable[[str | None], tuple[int, str, int]]


async def read_head(reader: asyncio.StreamReader, limit: int = MAX_HEAD_BYTES) -> bytes:
    """What the client sent up to the end of its first request head (perhaps a bit more).

    Stops at the blank line, at ``limit`` bytes or at EOF; every byte read is returned, so
    sending it on first and relaying the rest loses nothing.
    """
    buf = bytearray()
    while _END not in buf and len(buf) < limit:
        chunk = await reader.read(limit - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def session_in_head(head: bytes) -> str | None:
    """The session the first request of ``head`` belongs to, read as the interceptor reads it.

    Only whole header lines count; a head that is not HTTP/1 names no session.
    """
    text = head.split(_END, 1)[0].decode("latin-1")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    target = parts[1]
    if "://" in target:  # absolute form (a forward proxy's plain-HTTP request)
        split = urlsplit(target)
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    complete = lines[1:] if _END in head else lines[1:-1]
    headers: dict[str, str] = {}
    for line in complete:
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers.setdefault(name.strip(), value.strip())
    session, _ = session_of(headers, target)
    return session


class ConnectionRouter:
    """Listens on ``host:port`` and relays each connection to the worker ``pick`` names."""

    def __init__(self, host: str, port: int, pick: Pick, head_timeout_s: float = 30.0) -> None:
        self.host = host
        self.port = port
        self._pick = pick
        self.head_timeout_s = head_timeout_s
        #: Connections relayed, by worker index.
        self.routed: Counter[int] = Counter()
        self._server: asyncio.Server | None = None
        # Each connection's handler and the streams it holds (the client's, then the worker's).
        self._relays: dict[asyncio.Task[None], list[asyncio.StreamWriter]] = {}

    async def start(self) -> None:
        """Listen (``port`` 0: any free port, then in ``port``)."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop_accepting(self) -> None:
        """Refuse new connections; those relayed go on (their workers are draining)."""
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Stop accepting and cut the connections still relayed."""
        self.stop_accepting()
        # Aborted rather than cancelled: each handler then ends as it would on a reset.
        for ends in self._relays.values():
            for end in ends:
                end.transport.abort()
        if self._relays:
            await asyncio.wait(list(self._relays), timeout=5)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def __aenter__(self) -> ConnectionRouter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        ends = self._relays[task] = [writer]
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                head = await asyncio.wait_for(read_head(reader), self.head_timeout_s)
            except (TimeoutError, OSError):
                return
            if not head:
                return
            worker, host, port = self._pick(session_in_head(head))
            try:
                up_reader, upstream = await asyncio.open_connection(host, port)
                ends.append(upstream)
            except OSError as exc:
                log.warning("worker %d at %s:%d refused a connection: %s", worker, host, port, exc)
                writer.write(_bad_gateway(f"interceptor worker {worker} is not available"))
                await writer.drain()
                return
            self.routed[worker] += 1
            upstream.write(head)
            await splice(reader, writer, up_reader, upstream)
        except OSError:
            pass  # the client went away while we answered it
        finally:
            self._relays.pop(task, None)
            for end in (upstream, writer):
                if end is not None:
                    end.close()


def _bad_gateway(message: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "worker_unavailable"}}).encode()
    head = (
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body
