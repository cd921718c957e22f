"""The few calls of the Docker Engine API the tools need, over the daemon's unix socket.

The standard library's HTTP client on a unix socket: no SDK to install, and nothing asynchronous
to drive from the synchronous start and stop of the engine.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from pathlib import Path
from typing import Any

#: Docker 20.10 (Debian bookworm's docker.io) speaks 1.41; newer daemons still accept it.
API_VERSION = "v1.41"


class EngineAPIError(OSError):
    """The daemon answered with an error status, or could not be reached."""


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection to a unix socket instead of a TCP address."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


class EngineAPI:
    """A client of one daemon's API socket; each call opens its own connection."""

    def __init__(self, socket_path: Path, timeout: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def request(self, method: str, path: str, timeout: float | None = None) -> tuple[int, bytes]:
        """``method path`` (under the API version); the status and the body."""
        conn = _UnixConnection(self.socket_path, self.timeout if timeout is None else timeout)
        try:
            conn.request(method, f"/{API_VERSION}{path}")
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise EngineAPIError(f"{method} {path} on {self.socket_path}: {exc}") from exc
        finally:
            conn.close()

    def json(self, method: str, path: str, timeout: float | None = None) -> Any:
        """``method path``, its JSON body; EngineAPIError on a status other than 2xx."""
        status, body = self.request(method, path, timeout)
        if not 200 <= status < 300:
            raise EngineAPIError(f"{method} {path}: {status} {body[:300]!r}")
        return json.loads(body) if body else None

    def ping(self, timeout: float = 2.0) -> bool:
        """Whether the daemon answers ``/_ping`` with OK."""
        try:
            status, body = self.request("GET", "/_ping", timeout)
        except EngineAPIError:
            return False
        return status == 200 and body.strip() == b"OK"

    def version(self) -> dict[str, Any]:
        """The daemon's ``/version`` answer (``Version``, ``ApiVersion``, components)."""
        result: dict[str, Any] = self.json("GET", "/version")
        return result

    def image(self, reference: str) -> dict[str, Any] | None:
        """The image ``reference`` names (``/images/{name}/json``); None if there is none."""
        status, body = self.request("GET", f"/images/{urllib.parse.quote(reference)}/json")
        if status == 404:
            return None
        if status != 200:
            raise EngineAPIError(f"inspecting image {reference}: {status} {body[:300]!r}")
        result: dict[str, Any] = json.loads(body)
        return result

    def images(self) -> list[dict[str, Any]]:
        """Every image of the daemon (``RepoTags``, ``Size``, ``Id``)."""
        result: list[dict[str, Any]] = self.json("GET", "/images/json")
        return result

    def tag(self, image: str, reference: str) -> None:
        """Give ``image`` the further name ``reference`` (``repository:tag``)."""
        repository, _, tag = reference.rpartition(":")
        query = urllib.parse.urlencode({"repo": repository, "tag": tag})
        self.json("POST", f"/images/{urllib.parse.quote(image)}/tag?{query}")

    def running_containers(self) -> list[str]:
        """The ids of the running containers."""
        return [c["Id"] for c in self.json("GET", "/containers/json")]

    def kill(self, container: str) -> None:
        """SIGKILL a running container (one that stopped meanwhile is not an error)."""
        status, body = self.request("POST", f"/containers/{container}/kill")
        if status not in (204, 404, 409):  # 409: not running any more
            raise EngineAPIError(f"killing container {container}: {status} {body[:300]!r}")
