"""The interceptor's admin port: health, metrics, sessions (registered or not), pause, policy."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol, overload

from aiohttp import web

from rollstream.host import reachable
from rollstream.http_auth import bearer_middleware, warn_if_open
from rollstream.interceptor.registry import RegistryError
from rollstream.schemas.calls import ContextMode
from rollstream.schemas.control import (
    HEALTH_PATH,
    METRICS_PATH,
    PAUSE_PATH,
    POLICY_VERSION_PATH,
    RESUME_PATH,
    SESSION_PATH,
)

if TYPE_CHECKING:
    from rollstream.interceptor.addon import RollstreamAddon
    from rollstream.interceptor.settings import InterceptorSettings
    from rollstream.producers.publisher.client import CapturePublisher


def server_url(host: str, port: int) -> str:
    """``http://host:port`` for a server listening on ``host``, as this machine reaches it.

    A wildcard listen address is no destination: loopback stands in (``host.reachable``).
    """
    address = reachable(host)
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


class AdminHandlers(Protocol):
    """What answers the admin port's routes: one interceptor, or a pool for all its workers."""

    async def health(self, request: web.Request) -> web.Response:
        """GET /health."""

    async def metrics(self, request: web.Request) -> web.Response:
        """GET /metrics."""

    async def session(self, request: web.Request) -> web.Response:
        """GET /sessions/{session}."""

    async def register(self, request: web.Request) -> web.Response:
        """PUT /sessions/{session}."""

    async def forget(self, request: web.Request) -> web.Response:
        """DELETE /sessions/{session}."""

    async def pause(self, request: web.Request) -> web.Response:
        """POST /admin/pause."""

    async def resume(self, request: web.Request) -> web.Response:
        """POST /admin/resume."""

    async def policy_version(self, request: web.Request) -> web.Response:
        """POST /admin/policy-version."""


def admin_routes(handlers: AdminHandlers) -> list[web.RouteDef]:
    """The admin port's routes, answered by ``handlers`` (the one table of them)."""
    return [
        web.get(HEALTH_PATH, handlers.health),
        web.get(METRICS_PATH, handlers.metrics),
        web.get(SESSION_PATH, handlers.session),
        web.put(SESSION_PATH, handlers.register),
        web.delete(SESSION_PATH, handlers.forget),
        web.post(PAUSE_PATH, handlers.pause),
        web.post(RESUME_PATH, handlers.resume),
        web.post(POLICY_VERSION_PATH, handlers.policy_version),
    ]


def admin_app(handlers: AdminHandlers, settings: InterceptorSettings | None) -> web.Application:
    """The admin port's application: ``admin_routes`` behind the settings' bearer tokens.

    ``settings`` None (a test of the routes alone) leaves them open.
    """
    token = None if settings is None else settings.admin_token
    metrics = None if settings is None else settings.metrics_token
    if settings is not None:
        warn_if_open("the interceptor's admin port", token, "ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN")
    app = web.Application(middlewares=[bearer_middleware(token, metrics_token=metrics)])
    app.add_routes(admin_routes(handlers))
    return app


def metrics_text(addon: RollstreamAddon, publisher: CapturePublisher) -> str:
    """Prometheus text exposition of the interceptor's and the publisher's counters."""
    m = publisher.metrics
    recorded = addon.recorder.counts
    exact = addon.exact.context
    bridge = addon.websockets
    ws = bridge.counts if bridge is not None else Counter[str]()
    values: list[tuple[str, str, float]] = [
        ("rollstream_calls_total", "counter", recorded.recorded),
        ("rollstream_calls_failed_total", "counter", recorded.failed),
        ("rollstream_records_too_large_total", "counter", recorded.too_large),
        ("rollstream_records_not_built_total", "counter", recorded.not_built),
        ("rollstream_records_lost_total", "counter", recorded.lost),
        ("rollstream_calls_in_flight", "gauge", sum(addon.in_flight.values())),
        ("rollstream_paused", "gauge", int(addon.gate.paused)),
        ("rollstream_pause_leases_expired_total", "counter", addon.gate.leases_expired),
        ("rollstream_policy_version", "gauge", addon.policy_version),
        ("rollstream_exact_sessions_evicted_total", "counter", exact.evicted if exact else 0),
        ("rollstream_requests_refused_total", "counter", sum(addon.refused.values())),
        ("rollstream_websockets_opened_total", "counter", ws["opened"]),
        ("rollstream_websockets_open", "gauge", len(bridge.open) if bridge is not None else 0),
        ("rollstream_websocket_calls_total", "counter", ws["calls"]),
        ("rollstream_websocket_warmups_total", "counter", ws["warmups"]),
        ("rollstream_websocket_messages_refused_total", "counter", ws["refused"] + ws["broken"]),
        ("rollstream_records_published_total", "counter", m.published),
        ("rollstream_publish_batches_total", "counter", m.batches),
        ("rollstream_records_spooled_total", "counter", m.spooled),
        ("rollstream_records_drained_total", "counter", m.drained),
        ("rollstream_records_adopted_total", "counter", m.adopted),
        ("rollstream_records_dropped_total", "counter", m.dropped),
        ("rollstream_records_rejected_total", "counter", m.rejected),
        ("rollstream_spool_held_records", "gauge", m.held),
        ("rollstream_publish_bytes_total", "counter", m.bytes_published),
        ("rollstream_publish_queue_depth", "gauge", m.queue_depth),
        ("rollstream_spool_bytes", "gauge", m.spool_bytes),
        ("rollstream_spool_alarm", "gauge", int(m.spool_alarm)),
        ("rollstream_broker_connected", "gauge", int(m.connected)),
    ]
    lines = []
    for name, kind, value in values:
        lines += [f"# TYPE {name} {kind}", f"{name} {value}"]
    return "\n".join(lines) + "\n"


class AdminApp:
    """Routes of the admin port."""

    def __init__(
        self, addon: RollstreamAddon, publisher: CapturePublisher, url: str | None = None
    ) -> None:
        self.addon = addon
        self.publisher = publisher
        #: The proxy's base URL, told to whoever registers a session (a pool tells its worker's).
        self.url = url

    def app(self, settings: InterceptorSettings | None = None) -> web.Application:
        """The aiohttp application, behind ``settings``' tokens (``admin_app``)."""
        return admin_app(self, settings)

    async def health(self, request: web.Request) -> web.Response:
        """Up, and whether the broker is reachable and the spool is healthy."""
        m = self.publisher.metrics
        return web.json_response(
            {
                "status": "ok",
                "broker_connected": m.connected,
                "spool_bytes": m.spool_bytes,
                "spool_alarm": m.spool_alarm,
                "paused": self.addon.gate.paused,
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus metrics."""
        return web.Response(
            text=metrics_text(self.addon, self.publisher), content_type="text/plain"
        )

    async def session(self, request: web.Request) -> web.Response:
        """Calls recorded and in flight for one session."""
        session = request.match_info["session"]
        return web.json_response(
            {
                "session": session,
                "calls_recorded": self.addon.ledger.calls(session),
                "in_flight": self.addon.in_flight.get(session, 0),
            }
        )

    async def register(self, request: web.Request) -> web.Response:
        """Accept the session's calls (strict mode); the node calls this before a harness runs.

        The reply names the proxy's ``url`` (a pool's: the worker that holds the session).

        An optional body ``{"context": "exact"|"ordinary"}`` sets the session's context mode.
        A context that is neither is a 400, the session still registered (in the default
        mode): a typo in a task must not lock its harness out in strict mode.
        """
        session = request.match_info["session"]
        body = await _json(request)
        context = body.get("context")
        wanted = None if context is None else str(context).strip().lower()
        refused = wanted is not None and wanted not in set(ContextMode)
        try:
            self.addon.sessions.register(session, None if refused else wanted)
        except RegistryError as exc:
            status = 500 if isinstance(exc.__cause__, OSError) else 400
            return web.json_response({"error": str(exc)}, status=status)
        mode = self.addon.exact.mode(None, session)
        reply: dict[str, Any] = {"session": session, "registered": True, "context": mode}
        if self.url is not None:
            reply["url"] = self.url
        if refused:
            error = f"context must be one of {', '.join(ContextMode)}, not {context!r}"
            return web.json_response(reply | {"error": error}, status=400)
        return web.json_response(reply)

    async def forget(self, request: web.Request) -> web.Response:
        """Refuse the session's calls from now on (strict mode); the node calls this at its end."""
        session = request.match_info["session"]
        try:
            self.addon.sessions.forget(session)
            self.addon.exact.forget(session)
        except RegistryError as exc:
            return web.json_response({"error": str(exc)}, status=500)
        return web.json_response({"session": session, "registered": False})

    async def pause(self, request: web.Request) -> web.Response:
        """Hold new calls until resumed; wait (bounded) until in-flight calls have drained.

        Body (all optional): ``drain_timeout_s`` (default 60), how long to wait for calls in
        flight; ``lease_s`` (default none), after which the pause ends on its own, for a client
        that may die while paused. The former ``timeout_s`` is refused (400, nothing paused):
        it made every pause end on its own, mid-sync if the sync was slow.
        """
        body = await _json(request)
        if "timeout_s" in body:
            raise _bad_request(
                "timeout_s is gone: a pause holds until /admin/resume; "
                "ask for lease_s to have it end on its own"
            )
        drain = _seconds(body, "drain_timeout_s", 60.0)
        lease = _seconds(body, "lease_s", None)
        self.addon.gate.pause(lease)
        deadline = time.monotonic() + drain
        # In-flight calls end in mitmproxy hooks; polling the counter keeps those hooks simple.
        while sum(self.addon.in_flight.values()) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        in_flight = sum(self.addon.in_flight.values())
        return web.json_response(
            {"paused": True, "in_flight": in_flight, "drained": in_flight == 0, "lease_s": lease}
        )

    async def resume(self, request: web.Request) -> web.Response:
        """Let calls through again."""
        self.addon.gate.resume()
        return web.json_response({"paused": False})

    async def policy_version(self, request: web.Request) -> web.Response:
        """Set the policy version stamped into new records."""
        body = await _json(request)
        version = body.get("version")
        if not isinstance(version, int) or version < 0:
            raise _bad_request("version must be a non-negative integer")
        self.addon.policy_version = version
        return web.json_response({"policy_version": version})


async def _json(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError as exc:
        raise web.HTTPBadRequest(
            text='{"error": "malformed JSON"}', content_type="application/json"
        ) from exc
    return body if isinstance(body, dict) else {}


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps({"error": message}), content_type="application/json")


@overload
def _seconds(body: dict[str, Any], name: str, default: float) -> float: ...
@overload
def _seconds(body: dict[str, Any], name: str, default: None) -> float | None: ...
def _seconds(body: dict[str, Any], name: str, default: float | None) -> float | None:
    """A positive number of seconds from the body (null or absent: ``default``), else a 400."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise _bad_request(f"{name} must be a positive number of seconds")
    return float(value)
