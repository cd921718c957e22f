"""What a process needs from the machine it runs on: a free port on loopback, a tool on PATH."""

from __future__ import annotations

import contextlib
import fcntl
import secrets
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

from rollstream.errors import MissingToolError

#: Every local service listens on loopback only.
HOST = "127.0.0.1"


def reachable(host: str) -> str:
    """An address to reach a server listening on ``host`` from this machine.

    A wildcard (0.0.0.0, ::, empty) listens everywhere but is no destination: loopback is.
    """
    return HOST if host in ("", "0.0.0.0", "::", "[::]") else host


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether ``port`` can be bound on ``host`` right now by a listening server.

    SO_REUSEADDR as the JVM sets it: a port whose old connections linger in TIME_WAIT (a
    broker just killed) is free to listen on again.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """The kernel's ephemeral range: where outgoing connections take their source ports."""
    try:
        low, high = (int(word) for word in path.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


#: Where :func:`free_port` picks, when the ephemeral range leaves room below it.
PICK_FLOOR = 20000


def free_port(host: str = HOST, avoid: frozenset[int] = frozenset()) -> int:
    """A port free on ``host`` now, for a server that binds it later (a guess, not a hold).

    Picked at random outside the kernel's ephemeral range: a port from that range (what binding
    port 0 gives) can be taken meanwhile as the source port of any outgoing connection, and
    then the server's bind fails. Random, so that two processes picking at once rarely agree.
    A server of our own asked for port 0 binds it itself and reports what it got instead.
    """
    ephemeral = ephemeral_ports()
    below = range(PICK_FLOOR, ephemeral.start)
    above = range(ephemeral.stop, 65536)
    candidates = below if len(below) >= 1000 else above
    if len(candidates) >= 1000:
        for _ in range(500):
            port = candidates[secrets.randbelow(len(candidates))]
            if port not in avoid and port_is_free(port, host):
                return port
    while True:  # no room outside the ephemeral range: the kernel's pick
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


def pick_port(preferred: int, avoid: frozenset[int] = frozenset()) -> int:
    """``preferred`` if it is set and free, else any free port."""
    if preferred and preferred not in avoid and port_is_free(preferred):
        return preferred
    return free_port(avoid=avoid | {preferred})


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold the lock file ``path`` (made if missing): one process at a time, the others wait.

    What a build made once per machine agrees on: whoever holds it builds, whoever waits
    finds the result when it gets the lock. The kernel releases it when its holder dies.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def require_tool(executable: str, install_hint: str) -> str:
    """Return the full path of ``executable`` or raise a one-line error naming what to install."""
    path = shutil.which(executable)
    if path is None:
        raise MissingToolError(f"{executable!r} not found on PATH: install {install_hint}")
    return path


def process_args(pid: int) -> list[bytes] | None:
    """The arguments of live process ``pid`` (from /proc); None if it is gone or a zombie.

    What tells a daemon's pid from a reused one: a pid file outlives its process.
    """
    if pid <= 0:
        return None
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The state follows the command name, which may itself hold ") ". A zombie is dead: on
    # machines whose init does not reap, one stays in the table indefinitely.
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return None
    return args
