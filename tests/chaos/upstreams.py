"""An upstream the chaos tests control: the reference backend behind a recording, faulty door.

Every request is recorded (method, path, headers, body) before anything else happens. The model
name a request asks for picks a fault, so one upstream serves good calls and bad ones side by
side: ``fault-429`` and ``fault-500`` answer that status, ``fault-hang`` never answers,
``fault-reset`` resets the connection before answering, ``fault-cut`` starts a stream and resets
the connection after two chunks. Any other model reaches the reference backend.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer

from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.models.tokenizer import ChatTokenizer

#: What the scripted backend answers a call that offers no tools: about 290 tokens.
LONG_ANSWER = " ".join(["The quick brown fox jumps over the lazy dog."] * 10)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

FAULTS = ("fault-429", "fault-500", "fault-hang", "fault-reset", "fault-cut")


@dataclass(frozen=True)
class SeenRequest:
    """One request as the upstream received it."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


def scripted_backend(directory: Path, tokenizer: ChatTokenizer, tpot_ms: float) -> Backend:
    """The scripted reference backend answering LONG_ANSWER at ``tpot_ms`` per token."""
    scenarios = directory / "scenarios.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    scenarios.write_text(
        "scenarios:\n  - name: talk\n    turns:\n      - text: Hello.\n"
        f"side_call_text: {LONG_ANSWER}\n"
    )
    settings = BackendSettings(policy="scripted", scenarios=scenarios, tpot_ms=tpot_ms)
    return Backend(settings, tokenizer=tokenizer)


def _chunk(text: str) -> bytes:
    chunk = {
        "id": "chatcmpl-cut",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fault-cut",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _reset(request: web.Request) -> None:
    """Close the connection with a TCP reset (SO_LINGER 0), as a crashed server would."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class FaultyUpstream:
    """``async with FaultyUpstream(backend) as upstream``: ``upstream.url``, ``.seen``."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.seen: list[SeenRequest] = []
        self.url = ""
        self._closing = asyncio.Event()
        self._server: TestServer | None = None

    async def __aenter__(self) -> FaultyUpstream:
        app = self.backend.app()
        app.middlewares.append(self._door)
        self._server = TestServer(app, host="127.0.0.1")
        await self._server.start_server()
        self.url = str(self._server.make_url("")).rstrip("/")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()  # hung handlers return, so the server closes at once
        assert self._server is not None
        await self._server.close()

    @web.middleware
    async def _door(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        body = await request.read()  # cached: the backend's handler reads it again
        self.seen.append(
            SeenRequest(request.method, request.path_qs, list(request.headers.items()), body)
        )
        try:
            model = json.loads(body).get("model") if body else None
        except (ValueError, AttributeError):
            model = None
        if model == "fault-429":
            error = {"message": "slow down (fake upstream)", "type": "rate_limit", "code": 429}
            return web.json_response({"error": error}, status=429)
        if model == "fault-500":
            return web.Response(status=500, text="internal failure (fake upstream)")
        if model == "fault-hang":
            await self._closing.wait()
            return web.Response(status=503)
        if model == "fault-reset":
            _reset(request)
            return web.Response(status=500)  # never sent: the connection is gone
        if model == "fault-cut":
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for text in ("partial ", "answer "):
                await response.write(_chunk(text))
                await asyncio.sleep(0.05)
            _reset(request)
            return response
        return await handler(request)
