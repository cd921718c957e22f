"""A deadline for the upstream's response headers, and cutting the call when it passes.

mitmproxy has no per-request upstream timeout, and once a request has gone upstream an addon can
no longer answer it by setting ``flow.response``. So when a call's deadline passes, mitmproxy is
made to *receive* a 504 from the upstream: a complete HTTP/1.1 response is fed to the flow's
server connection as if the upstream had sent it. mitmproxy then runs its usual response hooks
(the addon translates the error into the harness's API and records it) and, since the 504 says
``connection: close``, closes the real upstream connection: a late real answer is never read.

Forging bytes works on an established plain-HTTP/1 connection, which is how vLLM and SGLang are
reached. A connect still pending is cancelled instead (mitmproxy reports a failed connect, which
:mod:`errorpages` turns into a JSON 504); an established encrypted connection, whose bytes cannot
be forged, is closed (mitmproxy then answers 502).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from mitmproxy import http
from mitmproxy.connection import Server
from mitmproxy.proxy import events
from mitmproxy.proxy.mode_servers import ProxyConnectionHandler

from rollstream.interceptor.errorpages import TIMEOUT_PREFIX

log = logging.getLogger(__name__)

TIMEOUT_HEADER = "x-rollstream-upstream-timeout"
"""Marks the 504 we forge, so the response hook can tell it from an upstream's own 504."""

_RETRY_S = 0.1  # the flow has no upstream connection to cut yet: look again this soon

_CUT = "rollstream.upstream_cut"  # flow metadata: (status for the harness, message)


def upstream_cut(flow: http.HTTPFlow) -> tuple[int, str] | None:
    """What the harness gets (status, message) if this flow's deadline passed and it was cut."""
    cut: tuple[int, str] | None = flow.metadata.get(_CUT)
    return cut


def gateway_timeout(message: str) -> bytes:
    """A complete HTTP/1.1 504 response, as the upstream would send it, closing the connection."""
    body = json.dumps({"error": {"message": message, "type": "timeout", "code": 504}}).encode()
    head = (
        "HTTP/1.1 504 Gateway Timeout\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n"
        f"{TIMEOUT_HEADER}: 1\r\n\r\n"
    )
    return head.encode() + body


class UpstreamDeadlines:
    """One timer per LLM call, from its request hook until its response headers arrive.

    A call whose deadline passes is cut (see the module's docstring) and noted for
    :func:`upstream_cut`. ``master`` must be set (the addon's ``load`` hook does) for a call to
    be cut.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.master: Any = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._timers)

    def start(self, flow: http.HTTPFlow, delay: float | None = None) -> None:
        """Arm (or re-arm) the deadline of ``flow``."""
        self.stop(flow)
        loop = asyncio.get_running_loop()
        wait = self.timeout_s if delay is None else delay
        self._timers[flow.id] = loop.call_later(wait, self._fire, flow)

    def stop(self, flow: http.HTTPFlow) -> None:
        """The upstream answered (or the call ended): no deadline any more."""
        timer = self._timers.pop(flow.id, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, flow: http.HTTPFlow) -> None:
        self._timers.pop(flow.id, None)
        if flow.response is not None or not flow.live:
            return  # headers arrived and their hook has not run yet: too late to cut
        if self.master is None:
            return  # not running inside mitmproxy: there is no proxy server to cut through
        message = f"the upstream sent no response headers within {self.timeout_s:g} s"
        try:
            status = self._cut(flow, message)
        except Exception:  # a mitmproxy internal we rely on changed: keep serving
            log.exception("cannot cut the upstream of call %s", flow.id)
            return
        if status is None:
            self.start(flow, _RETRY_S)
            return
        log.warning("call %s: %s; answering %d", flow.id, message, status)
        flow.metadata[_CUT] = (status, message)

    def _cut(self, flow: http.HTTPFlow, message: str) -> int | None:
        """End the wait for the upstream; the status the harness gets, None if nothing to cut."""
        proxyserver = self.master.addons.get("proxyserver")
        handler: ProxyConnectionHandler | None = proxyserver.connections.get(flow.client_conn.id)
        if handler is None:
            return None  # the harness has gone: mitmproxy ends the flow itself
        server = flow.server_conn
        io = handler.transports.get(server)
        if io is not None and io.handler is not None:
            if server.connected and not server.tls:
                task = asyncio.create_task(self._inject(handler, flow, gateway_timeout(message)))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return 504
            io.handler.cancel(message)
            return 502
        connecting = _connecting(handler, flow)
        if connecting is None:
            return None
        task, tcp = connecting
        # A TCP connect we give up on is a gateway timeout (errorpages reads the prefix); a TLS
        # handshake that hangs ends as mitmproxy's failed handshake, a 502.
        task.cancel(TIMEOUT_PREFIX + message if tcp else message)
        return 504 if tcp else 502

    async def _inject(
        self, handler: ProxyConnectionHandler, flow: http.HTTPFlow, data: bytes
    ) -> None:
        # The real headers may have been read since the timer fired: then they win.
        if flow.response is None and flow.server_conn.connected:
            await handler.server_event(events.DataReceived(flow.server_conn, data))


def _connecting(
    handler: ProxyConnectionHandler, flow: http.HTTPFlow
) -> tuple[asyncio.Task[Any], bool] | None:
    """The task still connecting to the flow's upstream, and whether it is still at TCP.

    Until the connection is established, ``flow.server_conn`` is a placeholder: the connection
    being opened is another object, found among the handler's transports by its address.
    """
    address = (flow.request.host, flow.request.port)
    for connection, io in handler.transports.items():
        if (
            isinstance(connection, Server)
            and connection.address == address
            and connection != flow.server_conn
            and io.handler is not None
        ):
            return io.handler, io.reader is None
    return None
