"""Network walls on this machine: real namespaces, real listeners on 127.0.0.1, real processes.

A walled process reaches the one endpoint it is given (at its port on its own loopback) and
nothing else listening on this machine; without the wall it reaches everything (the control
that shows the probe can see an open port). Files it writes stay its caller's, it keeps its
user, and it cannot join the host's network namespace back.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from rollstream.errors import ConfigurationError
from rollstream.sandbox import runtime as runtime_module
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.sandbox.netns import Endpoint, Wall, wall_problem, walled_url
from rollstream.sandbox.runtime import LocalRuntime
from tests.network_probe import probe_command


@contextmanager
def _listener() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (a stand-in for the broker, an API)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@asynccontextmanager
async def _echo() -> AsyncIterator[int]:
    """A server on 127.0.0.1 answering each line with ``echo: <line>`` (the interceptor)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(b"echo: " + line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


def _shell(script: str) -> HarnessLaunch:
    return HarnessLaunch(["bash", "--noprofile", "--norc", "-c", script], {})


async def _probe(
    tmp_path: Path, targets: dict[str, tuple[str, int]], wall: Wall | None
) -> dict[str, str]:
    launch = _shell(probe_command(targets))
    work = tmp_path / "work"
    result = await run_harness(launch, tmp_path / "home", work, tmp_path / "logs", 60, wall)
    assert result.exit_code == 0, result.stderr_tail
    outcome: dict[str, str] = json.loads((work / "probe.json").read_text())
    return outcome


async def test_a_walled_process_reaches_its_endpoint_and_nothing_else(tmp_path: Path) -> None:
    with _listener() as broker, _listener() as admin:
        async with _echo() as interceptor:
            targets = {
                "interceptor": ("127.0.0.1", interceptor),
                "broker": ("127.0.0.1", broker),
                "admin": ("127.0.0.1", admin),
                "ipv6": ("::1", broker),
            }
            walled = await _probe(tmp_path / "a", targets, Wall(Endpoint("127.0.0.1", interceptor)))
            unwalled = await _probe(tmp_path / "b", targets, None)
    assert walled["interceptor"] == "open"
    assert walled["broker"] == walled["admin"] == "ConnectionRefusedError"
    assert walled["ipv6"] != "open"
    # The control: the same probe, unwalled, sees every port open.
    assert unwalled["broker"] == unwalled["admin"] == unwalled["interceptor"] == "open"


async def test_the_walled_process_inherits_no_socket_of_the_wall(
    tmp_path: Path,
) -> None:
    # The hand-over socket and the listener stay with the node: the harness has its stdio only.
    async with _echo() as port:
        launch = _shell("ls /proc/$$/fd; true")  # bash lists its own fds (no exec of ls)
        result = await run_harness(
            launch,
            tmp_path / "h",
            tmp_path / "w",
            tmp_path / "l",
            30,
            Wall(Endpoint("127.0.0.1", port)),
        )
    assert result.exit_code == 0, result.stderr_tail
    assert sorted(int(fd) for fd in result.stdout_tail.split()) == [0, 1, 2]


async def test_bytes_cross_the_wall_both_ways_through_the_relay(tmp_path: Path) -> None:
    script = (
        f"{sys.executable} -c '"
        "import socket, sys\n"
        's = socket.create_connection(("127.0.0.1", int(sys.argv[1])))\n'
        'f = s.makefile("rwb")\n'
        "for i in range(200):\n"
        '    f.write(b"line %d " % i + b"x" * 5000 + b"\\n"); f.flush()\n'
        '    assert f.readline().startswith(b"echo: line %d " % i)\n'
        'print("ok")\' {port}'
    )
    async with _echo() as port:
        launch = _shell(script.format(port=port))
        result = await run_harness(
            launch,
            tmp_path / "h",
            tmp_path / "w",
            tmp_path / "l",
            60,
            Wall(Endpoint("127.0.0.1", port)),
        )
    assert result.exit_code == 0, result.stderr_tail
    assert result.stdout_tail.strip() == "ok"


async def test_a_wall_without_endpoint_leaves_loopback_alone(tmp_path: Path) -> None:
    # Its own loopback works (a test server of the policy's code may listen there), the
    # machine's does not.
    script = (
        f"{sys.executable} -c '"
        "import socket\n"
        'l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()\n'
        "socket.create_connection(l.getsockname()).close()\n"
        'print("own loopback ok")\''
    )
    with _listener() as port:
        launch = _shell(script + f" && {probe_command({'host': ('127.0.0.1', port)})}")
        result = await run_harness(
            launch, tmp_path / "h", tmp_path / "w", tmp_path / "l", 60, Wall()
        )
    assert result.exit_code == 0, result.stderr_tail
    assert "own loopback ok" in result.stdout_tail
    assert json.loads((tmp_path / "w" / "probe.json").read_text()) == {
        "host": "ConnectionRefusedError"
    }


async def test_a_walled_process_keeps_its_user_and_cannot_join_the_host_network_back(
    tmp_path: Path,
) -> None:
    script = (
        "id -u > uid.txt; echo data > written.txt; "
        # As root outside, a process could setns back to PID 1's namespace; the user namespace
        # takes that capability away.
        f'{sys.executable} -c \'import os; os.setns(os.open("/proc/1/ns/net", os.O_RDONLY), '
        "os.CLONE_NEWNET)' 2> setns.txt; echo $? > setns-exit.txt"
    )
    work = tmp_path / "w"
    result = await run_harness(_shell(script), tmp_path / "h", work, tmp_path / "l", 60, Wall())
    assert result.exit_code == 0, result.stderr_tail
    assert int((work / "uid.txt").read_text()) == os.geteuid()
    assert (work / "written.txt").stat().st_uid == os.geteuid()
    assert (work / "setns-exit.txt").read_text().strip() != "0"
    assert "PermissionError" in (work / "setns.txt").read_text()


async def test_the_local_runtime_walls_only_when_on(tmp_path: Path) -> None:
    with _listener() as port:
        targets = {"host": ("127.0.0.1", port)}
        results = {}
        for walls in (True, False):
            runtime = LocalRuntime(tmp_path / str(walls), walls=walls)
            sandbox = await runtime.start("s")
            launch = _shell(probe_command(targets))
            await runtime.execute(sandbox, launch, 30, sandbox.logs / "probe", Wall())
            results[walls] = json.loads((sandbox.work / "probe.json").read_text())["host"]
            await runtime.stop(sandbox)
    assert results == {True: "ConnectionRefusedError", False: "open"}


def test_this_machine_allows_walls() -> None:
    # Everything above relies on it; said plainly when it does not hold.
    assert wall_problem() is None


@pytest.mark.parametrize(
    ("url", "inside", "target"),
    [
        ("http://127.0.0.1:8100", "http://127.0.0.1:8100", Endpoint("127.0.0.1", 8100)),
        ("http://interceptor:8100/", "http://127.0.0.1:8100/", Endpoint("interceptor", 8100)),
        ("http://localhost:81/s/x", "http://127.0.0.1:81/s/x", Endpoint("localhost", 81)),
        ("http://proxy.example", "http://127.0.0.1:80", Endpoint("proxy.example", 80)),
        ("https://[::1]:8443/v", "https://127.0.0.1:8443/v", Endpoint("::1", 8443)),
    ],
)
def test_walled_urls_point_at_loopback_at_the_same_port(
    url: str, inside: str, target: Endpoint
) -> None:
    assert walled_url(url) == (inside, target)


def test_a_url_without_host_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="names no host"):
        walled_url("/v1")


def test_a_runtime_that_cannot_wall_names_the_setting_that_turns_walls_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The probe's refusal (above, real) becomes a start-up error naming the way out.
    monkeypatch.setattr(runtime_module, "wall_problem", lambda: "namespaces refused")
    with pytest.raises(ConfigurationError, match="ROLLSTREAM_NODE_ISOLATION=none"):
        LocalRuntime(walls=True, chosen_by="ROLLSTREAM_NODE_ISOLATION")


@pytest.mark.parametrize(("wall", "expected"), [(Wall(), "refused"), (None, "readable")])
async def test_a_walled_process_cannot_read_the_nodes_environment(
    tmp_path: Path, wall: Wall | None, expected: str
) -> None:
    # The node's environment holds its tokens. Same user, but another user namespace: the
    # kernel refuses /proc/<pid>/environ (and ptrace) across it. The control reads it.
    script = (
        f"head -c 1 /proc/{os.getpid()}/environ > /dev/null 2>&1 && echo readable || echo refused"
    )
    result = await run_harness(
        _shell(script), tmp_path / "h", tmp_path / "w", tmp_path / "l", 30, wall
    )
    assert result.stdout_tail.strip() == expected
