"""The one way out of a network wall: connections to a listener inside it, relayed to a target.

``netns.py`` makes the listener inside the walled namespace; this accepts on it from outside and
copies bytes both ways to the target (the interceptor), one connection per connection. It is a
byte relay: HTTP, streaming and keep-alive pass through untouched, and the interceptor sees the
connection come from this process on loopback, as it would from an unwalled harness.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from types import TracebackType

from rollstream.sandbox.netns import Endpoint
from rollstream.streams import close_quietly, splice

log = logging.getLogger(__name__)

#: Connections one walled process may hold open through its relay (a harness needs a few): the
#: node's file descriptors are shared by every session.
MAX_CONNECTIONS = 256
#: How long stopping waits for the pipes it cut to end before cancelling them.
_STOP_WAIT_S = 5.0


class PortRelay:
    """Accepts on ``listener`` (a socket in a walled namespace) and relays each to ``target``."""

    def __init__(
        self, listener: socket.socket, target: Endpoint, max_connections: int = MAX_CONNECTIONS
    ) -> None:
        self.listener = listener
        self.target = target
        self.max_connections = max_connections
        self.connections = 0
        #: Connections closed at once: the target refused them, or too many were open.
        self.refused = 0
        self._stopping = False
        self._server: asyncio.Server | None = None
        self._pipes: dict[asyncio.Task[None], list[asyncio.StreamWriter]] = {}

    async def start(self) -> None:
        """Serve the listener (it is already bound and listening, in the wall)."""
        self.listener.setblocking(False)
        self._server = await asyncio.start_server(self._relay, sock=self.listener)

    async def stop(self) -> None:
        """Stop accepting, close the listener and cut the connections still open."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
            self._server = None
        self.listener.close()
        # Aborted, not cancelled: each pipe then ends on its own (the server's callback would
        # report a cancelled handler as an error). One still connecting upstream aborts its
        # new connection itself (``_stopping``); a pipe that hangs anyway is cancelled.
        for writers in self._pipes.values():
            for writer in writers:
                writer.transport.abort()
        if self._pipes:
            _, hanging = await asyncio.wait(list(self._pipes), timeout=_STOP_WAIT_S)
            for task in hanging:
                task.cancel()

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
            if len(self._pipes) > self.max_connections:
                self._refuse(f"{self.max_connections} connections already open")
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    self.target.host, self.target.port
                )
            except OSError as exc:
                # The walled process sees a connection closed at once, as with nobody listening.
                self._refuse(str(exc))
                return
            self.connections += 1
            self._pipes[task].append(up_writer)
            if self._stopping:
                up_writer.transport.abort()  # connected while the relay was being stopped
            try:
                await splice(reader, writer, up_reader, up_writer)
            finally:
                await close_quietly(up_writer)
        finally:
            await close_quietly(writer)
            self._pipes.pop(task, None)

    def _refuse(self, why: str) -> None:
        self.refused += 1
        if self.refused == 1:  # once per relay: a walled process must not flood the node's log
            log.warning(
                "relay to %s:%d closed a walled connection (%s); later ones are only counted",
                self.target.host,
                self.target.port,
                why,
            )
