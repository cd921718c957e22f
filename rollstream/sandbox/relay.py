"""The one way out of a network wall: connections to a listener inside it, relayed to a target.

``netns.py`` makes the listener inside the walled namespace; this accepts on it from outside and
copies bytes both ways to the target (the interceptor), one connection per connection. It is a
byte relay: HTTP, streaming and keep-alive pass through untouched, and the interceptor sees the
connection come from this process on loopback, as it would from an unwalled harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from types import TracebackType

from rollstream.sandbox.netns import Endpoint

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class PortRelay:
    """Accepts on ``listener`` (a socket in a walled namespace) and relays each to ``target``."""

    def __init__(self, listener: socket.socket, target: Endpoint) -> None:
        self.listener = listener
        self.target = target
        self.connections = 0
        self.refused = 0
        self._server: asyncio.Server | None = None
        self._pipes: dict[asyncio.Task[None], list[asyncio.StreamWriter]] = {}

    async def start(self) -> None:
        """Serve the listener (it is already bound and listening, in the wall)."""
        self.listener.setblocking(False)
        self._server = await asyncio.start_server(self._relay, sock=self.listener)

    async def stop(self) -> None:
        """Stop accepting, close the listener and cut the connections still open."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.listener.close()
        # Aborted, not cancelled: each pipe then ends on its own (the server's callback would
        # report a cancelled handler as an error).
        for writers in self._pipes.values():
            for writer in writers:
                writer.transport.abort()
        if self._pipes:
            await asyncio.wait(list(self._pipes))

    async def __aenter__(self) -> PortRelay:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes[task] = [writer]
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    self.target.host, self.target.port
                )
            except OSError as exc:
                # The walled process sees a connection closed at once, as with nobody listening.
                self.refused += 1
                log.warning(
                    "relay to %s:%d refused a walled connection: %s",
                    self.target.host,
                    self.target.port,
                    exc,
                )
                return
            self.connections += 1
            self._pipes[task].append(up_writer)
            try:
                await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            finally:
                await _close(up_writer)
        finally:
            await _close(writer)
            self._pipes.pop(task, None)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from ``reader`` to ``writer`` until EOF, then half-close ``writer``."""
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        # One side went away: the other's copy ends at its EOF or when the relay is stopped.
        writer.transport.abort()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()
