"""The Docker engine as the docker runtime reaches it: the SDK client, probes, its errors.

The SDK's unix connection leaves the socket of a failed connect open, so the engine's socket is
pinged over a plain socket of ours before the SDK is let near a socket that may be dead.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
from pathlib import Path
from typing import Any

from rollstream.errors import ConfigurationError, RollstreamError
from rollstream.sandbox.harnesses.runner import tail


class ContainerError(RollstreamError):
    """A session's container could not be made or run: a missing image, an engine that failed.

    The node ends the session ``failed`` with this message and goes on with its other sessions.
    """


def docker_client(chosen_by: str) -> Any:
    """A docker SDK client that reached the engine, or a ConfigurationError saying why not.

    ``chosen_by`` is the setting that asked for the docker runtime, named in the error.
    """
    otherwise = f"; set {chosen_by}=local otherwise"
    try:
        docker = importlib.import_module("docker")
    except ImportError:
        raise ConfigurationError(
            "the docker runtime needs the docker Python SDK (`pip install 'rollstream[docker]'`)"
            + otherwise
        ) from None

    def unreachable(problem: object) -> ConfigurationError:
        return ConfigurationError(
            f"the docker runtime needs a Docker engine, none reachable ({problem}){otherwise}"
        )

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    problem = (
        unix_socket_problem(host.removeprefix("unix://")) if host.startswith("unix://") else None
    )
    if problem is not None:
        raise unreachable(problem)
    client = None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        if client is not None:
            client.close()  # its connection pool, or its socket lingers
        raise unreachable(exc) from exc
    return client


def unix_socket_problem(path: str, timeout: float = 5.0) -> str | None:
    """Why the engine at the unix socket ``path`` does not answer ``GET /_ping``, or None.

    Asked before the SDK tries: its unix connection leaves the socket of a failed connect open.
    A connect alone is not enough: an engine being killed still has its listening socket for
    a moment, which takes the connection into its backlog and never answers; only an answer
    says the engine is there.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(path)
            probe.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status = probe.recv(64)
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
    if not status.startswith(b"HTTP/1."):
        return f"{path}: the engine closed the connection without an answer"
    return None


def socket_path(client: Any) -> str | None:
    """The unix socket an SDK client talks to; None for other transports (and test doubles)."""
    adapter = getattr(getattr(client, "api", None), "_custom_adapter", None)
    path = getattr(adapter, "socket_path", None)
    return path if isinstance(path, str) else None


def engine_failed(doing: str, cause: object) -> ContainerError:
    """The error of an engine gone or failing while ``doing``: another try may find it back."""
    return ContainerError(f"the Docker engine failed while {doing}: {cause}", retriable=True)


def close_stream(stream: Any) -> None:
    """Close a streamed exec's output and its HTTP response: the SDK leaves both open.

    ``CancellableStream.close`` does nothing once the engine ended the stream (a killed
    container), and the response's socket then lingers until the garbage collector warns.
    """
    if stream is None:
        return
    with contextlib.suppress(Exception):
        stream.close()
    response = getattr(stream, "_response", None)  # docker.types.daemon.CancellableStream's
    if response is not None:
        with contextlib.suppress(Exception):
            response.close()


#: The exit codes an OCI runtime gives an exec it could not start (not executable, not found).
NOT_RUN = (126, 127)


def say_not_run(argv: list[str], exit_code: int, logs: Path) -> None:
    """Name the command in the harness's stderr when the exec ended 126/127 with no output.

    The engine writes its "executable file not found" into the exec's stream, not always
    (seen: nothing at all on a busy machine); a harness result must still say what failed.
    """
    if tail(logs / "stdout") or tail(logs / "stderr"):
        return
    with (logs / "stderr").open("ab") as err:
        note = (
            f"rollstream: {argv[0]!r} ended with exit {exit_code} and no output in the "
            "container (126/127: the engine could not run it, e.g. it is not in the image)\n"
        )
        err.write(note.encode())


def pump_exec(api: Any, exec_id: str, logs: Path) -> None:
    """Copy the exec's demultiplexed output into ``logs/stdout`` and ``logs/stderr``."""
    with (logs / "stdout").open("wb") as out, (logs / "stderr").open("wb") as err:
        stream = None
        try:
            stream = api.exec_start(exec_id, stream=True, demux=True)
            for chunk_out, chunk_err in stream:
                if chunk_out:
                    out.write(chunk_out)
                    out.flush()
                if chunk_err:
                    err.write(chunk_err)
                    err.flush()
        except Exception as exc:
            # The SDK raises what requests and urllib3 raise when the engine goes away.
            raise engine_failed("the harness ran", exc) from exc
        finally:
            close_stream(stream)
