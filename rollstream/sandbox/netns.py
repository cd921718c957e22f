"""Network walls: a process in a network namespace of its own, reaching one address at most.

Policy-written code (a harness's tool calls, a scorer's command) must not reach what runs the
run: the broker, the interceptor's admin port, the node's API, the scorer. A walled process gets
a fresh network namespace, owned by a fresh user namespace, with loopback alone up. The user
namespace matters even as root: it is what takes away the capabilities (``CAP_SYS_ADMIN`` in
the parent namespace) a process would need to ``setns`` back into the host's network.

Where the process must still reach one service (the interceptor), the socket listening for it
is made *inside* the namespace, on ``127.0.0.1`` and the service's own port, and handed to the
parent over a Unix socket pair (``SCM_RIGHTS``) before the child execs: a socket keeps the
namespace it was made in, so the parent accepts on it from outside and relays each connection
(``relay.py``). No helper process, no root: an unprivileged user namespace is enough. For a
container, whose namespace the engine made, the parent makes that socket with ``setns`` (root).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from rollstream.errors import ConfigurationError, RollstreamError

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH14s"
_BACKLOG = 128


class WallError(RollstreamError):
    """A network wall could not be built (namespaces refused, the listener not handed over)."""


@dataclass(frozen=True)
class Endpoint:
    """A TCP address outside the wall that a walled process may reach, at the same port inside."""

    host: str
    port: int


@dataclass(frozen=True)
class Wall:
    """A process's network: its own namespace, loopback only, and ``reach`` relayed into it."""

    reach: Endpoint | None = None


def walled_url(url: str) -> tuple[str, Endpoint]:
    """``url`` as a walled process calls it (``127.0.0.1``, same port and path) and its target.

    Inside the wall there is no DNS and no other host: a name such as ``interceptor`` (Compose)
    would resolve nowhere, so the process is pointed at loopback, where the relay listens.
    """
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ConfigurationError(f"{url!r} names no host to relay to")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    inside = urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
    return inside, Endpoint(parts.hostname, port)


def loopback_up() -> None:
    """Bring ``lo`` up in the current network namespace (it starts down in a new one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack(_IFREQ, b"lo", 0, b"")
        flags = struct.unpack(_IFREQ, fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP, b""))


def listen_loopback(port: int) -> socket.socket:
    """A socket listening on ``127.0.0.1:port`` in the current network namespace."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(_BACKLOG)
    return listener


def enter_wall(channel_fd: int | None = None, port: int | None = None) -> None:
    """In a child before exec: new user and network namespaces, loopback up, maybe a listener.

    The ids map to themselves, so the process keeps its user (files it writes stay the
    caller's). With ``port``, a listener on ``127.0.0.1:port`` made here is sent over
    ``channel_fd`` (one end of a Unix socket pair) and closed: the parent holds it from then on.
    """
    uid, gid = os.geteuid(), os.getegid()
    os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNET)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    loopback_up()
    if port is not None and channel_fd is not None:
        # Closed here, not kept: a pass_fds entry would otherwise stay open in the harness.
        with socket.socket(fileno=channel_fd) as channel, listen_loopback(port) as listener:
            socket.send_fds(channel, [b"L"], [listener.fileno()])


def received_listener(channel: socket.socket) -> socket.socket:
    """The listener a walled child sent over ``channel`` (it did so before exec)."""
    channel.setblocking(False)
    try:
        _, fds, _, _ = socket.recv_fds(channel, 1, 1)
    except BlockingIOError:
        fds = []
    if not fds:
        raise WallError("the walled process handed over no listener")
    listener = socket.socket(fileno=fds[0])
    listener.set_inheritable(False)  # SCM_RIGHTS hands it over inheritable: no child gets it
    return listener


def listener_in_namespace(pid: int, port: int) -> socket.socket:
    """A listener on ``127.0.0.1:port`` in the network namespace of process ``pid`` (setns).

    For a container the engine made (``--network none``): a thread of ours joins its namespace
    just long enough to make the socket, then returns to ours. Needs ``CAP_SYS_ADMIN`` (root).
    """
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def make() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                os.setns(target, os.CLONE_NEWNET)
                try:
                    made.append(listen_loopback(port))
                finally:
                    try:
                        os.setns(own, os.CLONE_NEWNET)
                    except OSError:
                        for listener in made:
                            listener.close()
                        made.clear()
                        raise
            finally:
                os.close(target)
        except BaseException as exc:
            failed.append(exc)
        finally:
            os.close(own)

    # A thread of its own: setns moves the calling thread only, and a pool thread that failed
    # to come back must not serve other work in the container's namespace.
    thread = threading.Thread(target=make, name=f"netns-{pid}", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise WallError(f"no listener in the namespace of process {pid}: {failed[0]}")
    return made[0]


def wall_problem() -> str | None:
    """Why walls cannot be built here (None: they can), from a child that tries one."""
    read_end, write_end = os.pipe()

    def attempt() -> None:
        try:
            enter_wall()
        except OSError as exc:
            os.write(write_end, f"{exc.strerror or exc}".encode()[:300])
            raise

    try:
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run(["true"], preexec_fn=attempt, pass_fds=[write_end], timeout=30)
            return None
        os.close(write_end)
        write_end = -1
        reason = os.read(read_end, 400).decode(errors="replace") or "refused"
    except OSError as exc:
        return f"the namespace probe did not run: {exc}"
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return (
        f"a process cannot get user and network namespaces of its own here ({reason}): user "
        "namespaces are disabled (sysctl user.max_user_namespaces) or forbidden (a container "
        "without CAP_SYS_ADMIN)"
    )


def setns_problem() -> str | None:
    """Why this process cannot make sockets in a container's namespace (None: it can)."""
    if os.geteuid() != 0:
        return "joining a container's network namespace (setns) needs root"
    return None


def preexec(*steps: Callable[[], None]) -> Callable[[], None]:
    """One ``preexec_fn`` running ``steps`` in order."""

    def run() -> None:
        for step in steps:
            step()

    return run


@contextlib.contextmanager
def channel_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A Unix socket pair (parent's end, child's end), both closed at the end."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        yield parent, child
    finally:
        parent.close()
        child.close()
