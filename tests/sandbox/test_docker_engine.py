"""The engine probe: only an engine that answers is one the SDK may be let near."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rollstream.sandbox.docker_engine import unix_socket_problem


@contextmanager
def _listener(path: Path, answer: Callable[[socket.socket], object]) -> Iterator[None]:
    """A unix socket at ``path`` whose one connection ``answer`` serves."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        with server:
            connection, _ = server.accept()
            with connection:
                answer(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(5)


def test_an_engine_that_answers_its_ping_is_there(tmp_path: Path) -> None:
    def pong(connection: socket.socket) -> None:
        connection.recv(1024)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK")

    with _listener(tmp_path / "ok.sock", pong):
        assert unix_socket_problem(str(tmp_path / "ok.sock")) is None


def test_an_engine_dying_with_its_socket_still_open_is_not(tmp_path: Path) -> None:
    # As a SIGKILLed dockerd for a moment: the connection is taken, then closed unanswered.
    with _listener(tmp_path / "dying.sock", lambda connection: None):
        problem = unix_socket_problem(str(tmp_path / "dying.sock"))
    assert problem is not None  # reset, or closed without an answer


def test_an_engine_that_takes_the_connection_and_never_answers_is_not(tmp_path: Path) -> None:
    done = threading.Event()
    with _listener(tmp_path / "hung.sock", lambda connection: done.wait(5)):
        problem = unix_socket_problem(str(tmp_path / "hung.sock"), timeout=0.5)
        done.set()
    assert problem is not None and "timed out" in problem


def test_no_engine_at_all_is_not(tmp_path: Path) -> None:
    problem = unix_socket_problem(str(tmp_path / "absent.sock"))
    assert problem is not None and "absent.sock" in problem
