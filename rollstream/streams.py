"""Byte pipes between two TCP connections: what a relay or a router does once it has both ends.

The interceptor's pool router and the sandbox's wall relay both copy bytes both ways until each
side ends; a reset on one side must reach the other as it would without them in between.
"""

from __future__ import annotations

import asyncio
import contextlib

_CHUNK = 64 * 1024


async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close ``dst``; a broken side aborts the other."""
    try:
        while chunk := await src.read(_CHUNK):
            dst.write(chunk)
            await dst.drain()
        if dst.can_write_eof() and not dst.is_closing():
            dst.write_eof()
    except OSError:
        # One side went away: the other's copy ends at its EOF or when its owner stops.
        dst.transport.abort()


async def splice(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    """Pipe ``a`` into ``b`` and ``b`` into ``a`` until both directions have ended."""
    await asyncio.gather(pipe(a_reader, b_writer), pipe(b_reader, a_writer))


async def close_quietly(writer: asyncio.StreamWriter) -> None:
    """Close ``writer`` and wait for it, whatever state its peer left the connection in."""
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
