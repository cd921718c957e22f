"""The relay out of a wall, on real sockets: bytes arrive whole and in order, both ways.

Any listening socket will do for the relay's side (in production it sits in a walled namespace;
``test_netns.py`` covers that), so these run on this machine's loopback.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollstream.sandbox.netns import Endpoint, listen_loopback, received_listener
from rollstream.sandbox.relay import PortRelay


@asynccontextmanager
async def _echo_server() -> AsyncIterator[int]:
    """Echoes every byte back, then half-closes when the client does."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        writer.write_eof()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def _round_trip(port: int, chunks: list[bytes]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
    writer.write_eof()
    echoed = await reader.read()  # to EOF: the server's half-close, relayed
    writer.close()
    return echoed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations=st.lists(
        st.lists(st.binary(min_size=0, max_size=200_000), max_size=5), min_size=1, max_size=6
    )
)
async def test_every_byte_comes_back_whole_on_every_connection(
    conversations: list[list[bytes]],
) -> None:
    async with _echo_server() as target:
        listener = listen_loopback(0)
        port = listener.getsockname()[1]
        async with PortRelay(listener, Endpoint("127.0.0.1", target)) as relay:
            echoed = await asyncio.gather(*(_round_trip(port, c) for c in conversations))
        assert echoed == [b"".join(c) for c in conversations]
        assert relay.connections == len(conversations)


async def test_a_target_that_is_down_closes_the_connection_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        down = closed.getsockname()[1]  # bound, never listening: refused
        listener = listen_loopback(0)
        with caplog.at_level(logging.WARNING):
            async with PortRelay(listener, Endpoint("127.0.0.1", down)) as relay:
                reader, writer = await asyncio.open_connection(*listener.getsockname())
                assert await reader.read() == b""  # closed at once, nothing sent
                writer.close()
    assert relay.refused == 1 and relay.connections == 0
    assert f"relay to 127.0.0.1:{down} closed a walled connection" in caplog.text


async def test_stopping_the_relay_cuts_open_connections() -> None:
    async with _echo_server() as target:
        listener = listen_loopback(0)
        address = listener.getsockname()
        relay = PortRelay(listener, Endpoint("127.0.0.1", target))
        await relay.start()
        reader, writer = await asyncio.open_connection(*address)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        await relay.stop()
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(*address)


async def test_connections_past_the_cap_are_closed_and_counted_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _echo_server() as target:
        listener = listen_loopback(0)
        address = listener.getsockname()
        with caplog.at_level(logging.WARNING):
            async with PortRelay(listener, Endpoint("127.0.0.1", target), 2) as relay:
                held = [await asyncio.open_connection(*address) for _ in range(2)]
                for reader, writer in held:  # both served
                    writer.write(b"x")
                    assert await reader.readexactly(1) == b"x"
                for _ in range(3):
                    reader, writer = await asyncio.open_connection(*address)
                    assert await reader.read() == b""  # closed at once
                    writer.close()
                for _, writer in held:
                    writer.close()
    assert relay.connections == 2 and relay.refused == 3
    assert caplog.text.count("closed a walled connection") == 1
    assert "2 connections already open" in caplog.text


def test_a_received_listener_is_not_inherited_by_children() -> None:
    parent, child = socket.socketpair()
    with parent, child, listen_loopback(0) as listener:
        socket.send_fds(child, [b"L"], [listener.fileno()])
        with received_listener(parent) as got:
            assert not got.get_inheritable()
