"""The byte pipe under the pool router and the wall relay: EOF passes as EOF, a reset as a reset."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator

from rollstream.streams import close_quietly, splice

Ends = tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.asynccontextmanager
async def _relayed_pair() -> AsyncIterator[Ends]:
    """A client and a server connection on 127.0.0.1, with a splice between them."""
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def upstream(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await accepted.put((r, w))

    target = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = target.sockets[0].getsockname()[1]

    async def relay(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
        try:
            await splice(r, w, up_r, up_w)
        finally:
            await close_quietly(up_w)
            await close_quietly(w)

    middle = await asyncio.start_server(relay, "127.0.0.1", 0)
    client_r, client_w = await asyncio.open_connection(
        "127.0.0.1", middle.sockets[0].getsockname()[1]
    )
    server_r, server_w = await accepted.get()
    async with target, middle:
        try:
            yield client_r, client_w, server_r, server_w
        finally:
            for writer in (client_w, server_w):
                await close_quietly(writer)


async def test_bytes_both_ways_and_a_half_close_passes_through() -> None:
    async with _relayed_pair() as (client_r, client_w, server_r, server_w):
        client_w.write(b"x" * 300_000)  # more than one chunk
        client_w.write_eof()
        assert await server_r.read() == b"x" * 300_000  # EOF arrived as EOF
        server_w.write(b"answer")  # the other direction still flows
        await server_w.drain()
        server_w.close()
        assert await client_r.read() == b"answer"


async def test_a_reset_on_one_side_resets_the_other() -> None:
    async with _relayed_pair() as (client_r, _, _, server_w):
        sock = server_w.get_extra_info("socket")
        # SO_LINGER 0: the close sends a reset, as a crashed peer's kernel does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        server_w.transport.abort()
        async with asyncio.timeout(10):
            try:
                data = await client_r.read()
            except ConnectionResetError:
                data = None
        assert data in (None, b"")  # closed at once, not left hanging
