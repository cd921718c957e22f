"""What a process needs from its machine: free ports that stay free, locks, tools."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from rollstream import host
from rollstream.errors import MissingToolError


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path: Path) -> None:
    sysctl = tmp_path / "ip_local_port_range"
    sysctl.write_text("40000\t50000\n")
    assert host.ephemeral_ports(sysctl) == range(40000, 50001)
    assert host.ephemeral_ports(tmp_path / "missing") == range(32768, 61000)


def test_a_free_port_is_never_one_an_outgoing_connection_could_take() -> None:
    """Outgoing connections take source ports from the ephemeral range: a guess there is a race.

    (Seen: `stack up` failed binding a port picked a moment before, "address already in use".)
    """
    ephemeral = host.ephemeral_ports()
    picked = {host.free_port() for _ in range(200)}
    assert not picked & set(ephemeral)
    assert all(port >= host.PICK_FLOOR for port in picked)
    assert len(picked) > 150  # random: two pickers at once rarely agree


def test_a_free_port_is_free_and_not_one_to_avoid() -> None:
    with socket.socket() as taken:
        taken.bind((host.HOST, 0))
        taken.listen()
        port = host.free_port()
        assert host.port_is_free(port)
        avoid = frozenset(range(host.PICK_FLOOR, host.PICK_FLOOR + 5000))
        assert host.free_port(avoid=avoid) not in avoid


def test_without_room_outside_the_ephemeral_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sysctl = tmp_path / "ip_local_port_range"
    sysctl.write_text("1024 65535\n")
    read = host.ephemeral_ports
    monkeypatch.setattr(host, "ephemeral_ports", lambda: read(sysctl))
    port = host.free_port()
    assert port in host.ephemeral_ports() and host.port_is_free(port)


def test_exclusive_lets_one_holder_in_at_a_time(tmp_path: Path) -> None:
    lock = tmp_path / "deep" / "build.lock"
    order: list[str] = []

    def second() -> None:
        with host.exclusive(lock):
            order.append("second")

    with host.exclusive(lock):
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.3)
        order.append("first done")
    waiter.join(10)
    assert order == ["first done", "second"]


def test_a_missing_tool_names_what_to_install() -> None:
    with pytest.raises(MissingToolError, match="install the moon"):
        host.require_tool("no-such-tool-anywhere", "the moon")
