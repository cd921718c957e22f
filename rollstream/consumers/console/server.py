"""The console's HTTP face: the page, its assets, the JSON API and the live stream.

Reading takes the console's bearer token; the ``/api/control/`` routes take the control token
(the read token there is refused with 403). The page and its assets are open: they hold no
data. The live stream is server-sent events, one ``fleet`` event a second; the browser reads it
with ``fetch`` so that it can send the token in a header rather than in the URL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from aiokafka.errors import KafkaError
from pydantic import SecretStr

from rollstream.consumers.console.assets import Assets
from rollstream.consumers.console.controls import Controls
from rollstream.consumers.console.feed import Feed
from rollstream.consumers.console.fleet import SESSION_FILTERS, Fleet
from rollstream.consumers.console.rewards import Rewards
from rollstream.consumers.console.settings import ConsoleSettings
from rollstream.errors import ConfigurationError
from rollstream.http_auth import METRICS_PATH, matches, unauthorized


class Served(Protocol):
    """What the routes read and call: the running console (``service.Console``)."""

    settings: ConsoleSettings
    feed: Feed
    fleet: Fleet
    rewards: Rewards
    controls: Controls
    streams: int
    stopping: bool

    def snapshot(self) -> dict[str, Any]:
        """The fleet's figures with the services' own."""
        ...

    def metrics_text(self) -> str:
        """The console's own counters, as Prometheus text."""
        ...

    async def trajectory(self, trajectory_id: str, topic: str | None) -> dict[str, Any] | None:
        """The viewer's data of one trajectory; None if not found."""
        ...


log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: Query parameters of a page of sessions, by the row field each filters.
SESSION_PARAMS = {"task": "task_id", "group": "group_id", "harness": "harness"} | {
    f: f for f in ("status", "policy_version")
}
MAX_LIMIT = 500
#: Whether the request came with the control token (set by the middleware).
CONTROL = web.RequestKey("control", bool)
#: Seconds between two ``fleet`` events of the live stream.
STREAM_EVERY_S = 1.0


def _bounded(request: web.Request, name: str, default: int, top: int) -> int:
    raw = request.query.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise web.HTTPBadRequest(
            text=json.dumps(
                {"error": {"type": "bad_request", "message": f"{name} must be a whole number"}}
            ),
            content_type="application/json",
        ) from None
    return max(0, min(value, top))


def session_filters(request: web.Request) -> dict[str, str]:
    """The session filters a request names, by row field."""
    found = {field: request.query.get(param, "") for param, field in SESSION_PARAMS.items()}
    assert set(found) <= set(SESSION_FILTERS)
    return found


def auth_middleware(token: SecretStr, control_token: SecretStr | None) -> Any:
    """Read token on ``/api/``, control token on ``/api/control/``; the request says which."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/api/") and request.path != METRICS_PATH:
            return await handler(request)
        presented = request.headers.get("Authorization")
        control = control_token is not None and matches(presented, control_token)
        if not control and not matches(presented, token):
            log.info("console: refused %s %s (no valid token)", request.method, request.path)
            return unauthorized("the console needs its token: Authorization: Bearer <token>")
        if request.path.startswith("/api/control/") and not control:
            return web.json_response(
                {
                    "error": {
                        "type": "forbidden",
                        "message": "this token may read the console, not act: the control "
                        "token is needed",
                    }
                },
                status=403,
            )
        request[CONTROL] = control
        return await handler(request)

    return guard


def _json_error(status: int, message: str, kind: str = "bad_request") -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure in the caller's protocol: JSON ``{"error": {"type", "message"}}``."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.content_type == "application/json":
            raise
        return _json_error(exc.status, exc.reason, "http_error")
    except TimeoutError as exc:
        return _json_error(504, str(exc) or "timed out", "timeout")
    except KafkaError as exc:
        log.warning("console: Kafka failed a request to %s: %s", request.path, exc)
        return _json_error(503, f"Kafka did not answer: {exc}", "unavailable")
    except Exception:
        log.exception("console: %s %s failed", request.method, request.path)
        return _json_error(500, "the console failed on this request (see its log)", "internal")


class ConsoleApp:
    """The routes, answered from a running console."""

    def __init__(self, console: Served, assets: Assets) -> None:
        self.console = console
        self.assets = assets

    def app(self) -> web.Application:
        """The aiohttp application."""
        settings = self.console.settings
        assert settings.token is not None
        app = web.Application(
            middlewares=[json_errors, auth_middleware(settings.token, settings.control_token)]
        )
        app.add_routes(
            [
                web.get("/", self.index),
                web.get("/health", self.health),
                web.get(METRICS_PATH, self.metrics),
                web.get("/static/{name}", self.static),
                web.get("/api/whoami", self.whoami),
                web.get("/api/fleet", self.fleet),
                web.get("/api/stream", self.stream),
                web.get("/api/sessions", self.sessions),
                web.get("/api/groups", self.groups),
                web.get("/api/rewards", self.rewards),
                web.get("/api/jobs", self.jobs),
                web.get("/api/trajectories/{trajectory_id:.+}", self.trajectory),
                web.post("/api/control/pause", self.pause),
                web.post("/api/control/resume", self.resume),
                web.post("/api/control/replay", self.replay),
                web.post("/api/control/export", self.export),
            ]
        )
        return app

    async def index(self, request: web.Request) -> web.Response:
        """The page (no data in it)."""
        return web.Response(text=self.assets.page(), content_type="text/html")

    async def health(self, request: web.Request) -> web.Response:
        """Up, and whether the feed has caught up with the log."""
        return web.json_response({"status": "ok", "caught_up": self.console.feed.caught_up})

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text: what the console read, skipped and serves (read token)."""
        return web.Response(text=self.console.metrics_text(), content_type="text/plain")

    async def static(self, request: web.Request) -> web.StreamResponse:
        """The built front end's files."""
        path: Path | None = self.assets.file(request.match_info["name"])
        if path is None:
            raise web.HTTPNotFound()
        return web.FileResponse(path, headers={"Cache-Control": "no-cache"})

    async def whoami(self, request: web.Request) -> web.Response:
        """Whether the caller holds the control token."""
        return web.json_response({"control": request.get(CONTROL, False)})

    async def fleet(self, request: web.Request) -> web.Response:
        """The fleet's snapshot."""
        return web.json_response(self.console.snapshot())

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the fleet's snapshot once a second until the caller leaves."""
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        self.console.streams += 1
        try:
            while not self.console.stopping:
                data = json.dumps(self.console.snapshot(), separators=(",", ":"))
                await response.write(f"event: fleet\ndata: {data}\n\n".encode())
                await asyncio.sleep(STREAM_EVERY_S)
        except ConnectionResetError:
            pass  # the browser left
        finally:
            self.console.streams -= 1
        return response

    async def sessions(self, request: web.Request) -> web.Response:
        """A page of sessions, filtered."""
        offset = _bounded(request, "offset", 0, 10**9)
        limit = _bounded(request, "limit", 50, MAX_LIMIT)
        return web.json_response(self.console.fleet.page(session_filters(request), offset, limit))

    async def groups(self, request: web.Request) -> web.Response:
        """A page of GRPO groups with rewards and advantages."""
        offset = _bounded(request, "offset", 0, 10**9)
        limit = _bounded(request, "limit", 20, MAX_LIMIT)
        filters = {"task_id": request.query.get("task", "")}
        return web.json_response(self.console.rewards.page(filters, offset, limit))

    async def rewards(self, request: web.Request) -> web.Response:
        """Reward series and staleness."""
        return web.json_response(self.console.rewards.series())

    async def jobs(self, request: web.Request) -> web.Response:
        """The replays and exports started here."""
        return web.json_response({"jobs": [j.public() for j in self.console.controls.jobs]})

    async def trajectory(self, request: web.Request) -> web.Response:
        """One trajectory, read back from its topic."""
        trajectory_id = request.match_info["trajectory_id"]
        topic = request.query.get("topic") or None
        view = await self.console.trajectory(trajectory_id, topic)
        if view is None:
            return web.json_response(
                {
                    "error": {
                        "type": "not_found",
                        "message": f"no trajectory {trajectory_id} in "
                        f"{topic or 'the topics read'} (not yet written, or gone by retention)",
                    }
                },
                status=404,
            )
        return web.json_response(view)

    async def pause(self, request: web.Request) -> web.Response:
        """Pause capture on every interceptor."""
        return await self._act(self.console.controls.pause())

    async def resume(self, request: web.Request) -> web.Response:
        """Resume capture on every interceptor."""
        return await self._act(self.console.controls.resume())

    async def _act(self, action: Awaitable[list[dict[str, Any]]]) -> web.Response:
        try:
            results = await action
        except ConfigurationError as exc:
            return _json_error(409, str(exc))
        ok = all(r["status"] == 200 for r in results)
        return web.json_response({"ok": ok, "results": results}, status=200 if ok else 502)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise web.HTTPBadRequest(
                text=json.dumps({"error": {"type": "bad_request", "message": "a JSON body"}}),
                content_type="application/json",
            ) from None
        return body if isinstance(body, dict) else {}

    def _selection(self, body: dict[str, Any]) -> frozenset[str] | None:
        """The sessions a control's ``filters`` (the session list's) select; None: all."""
        filters = body.get("filters") or {}
        if not isinstance(filters, dict):
            raise web.HTTPBadRequest(
                text=json.dumps(
                    {"error": {"type": "bad_request", "message": "filters: an object"}}
                ),
                content_type="application/json",
            )
        wanted = {SESSION_PARAMS.get(str(k), str(k)): str(v) for k, v in filters.items() if v != ""}
        if not wanted:
            return None
        return self.console.fleet.select(wanted)

    async def replay(self, request: web.Request) -> web.Response:
        """Replay the retained sessions (or a selection) with a strategy."""
        body = await self._body(request)
        selection = self._selection(body)
        try:
            job = self.console.controls.replay(
                str(body.get("strategy", "")), set(selection) if selection is not None else None
            )
        except ConfigurationError as exc:
            return _json_error(400, str(exc))
        return web.json_response({"ok": True, "topic": job.target, "job": job.public()}, status=202)

    async def export(self, request: web.Request) -> web.Response:
        """Export a topic's trajectories (or a selection's) to Parquet."""
        body = await self._body(request)
        selection = self._selection(body)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        name = str(body.get("name") or f"export-{stamp}-{len(self.console.controls.jobs) + 1}")
        try:
            job = self.console.controls.export(str(body.get("topic") or "scored"), selection, name)
        except ConfigurationError as exc:
            return _json_error(400, str(exc))
        return web.json_response({"ok": True, "path": job.target, "job": job.public()}, status=202)
