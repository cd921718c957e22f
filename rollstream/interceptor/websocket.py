"""Codex's WebSocket transport, ended here: each of its calls takes the proxy's own HTTP path.

vLLM and SGLang serve no WebSocket, so the proxy cannot pass one on. The addon hands an
upgrade on the Responses route, once it has passed the checks a call passes (policy, session),
to this bridge: a server on loopback that answers the upgrade, turns each ``response.create``
into the whole HTTP request it stands for (``apis.responses_ws``) and sends it to the
interceptor's own proxy port with the upgrade's headers. The call is then gated, translated,
captured and recorded by the HTTP path itself, exactly as if the harness had sent it; the
bridge relays its answer's events as WebSocket messages and keeps the connection's last
response, which the next create may name instead of repeating the history.

The upgrade reaches the bridge through mitmproxy with a one-time ticket the addon made for it
(the session, the credential and the headers stay in memory): a connection without one is
refused, so nothing reaches the bridge around the proxy's checks. A message that is no call is
answered with an ``error`` event and recorded as a refused call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from mitmproxy import http

from rollstream.apis.responses_ws import (
    CREATE,
    AnswerTracker,
    Conversation,
    WsMessageError,
    error_event,
    error_from_http,
    http_request,
    is_warmup,
    read_message,
    warmup,
)
from rollstream.apis.sse import SSEParser
from rollstream.schemas import Caller, jsonfast

log = logging.getLogger(__name__)

#: The addon's ticket for one upgrade, on the request mitmproxy passes to the bridge.
TICKET_HEADER = "x-rollstream-ws-ticket"
#: On each call the bridge sends, with the bridge's secret: the harness spoke WebSocket
#: (``CallRecord.transport``). A harness cannot claim it: it does not know the secret.
TRANSPORT_HEADER = "x-rollstream-websocket"
#: Upgrades admitted and not yet opened: more are a client that never connects (oldest go).
MAX_TICKETS = 1024
#: Headers of the upgrade that belong to it, not to the calls made from it.
_UPGRADE_ONLY = frozenset(
    {
        "host",
        "connection",
        "upgrade",
        "content-length",
        "content-type",
        "accept",
        "accept-encoding",
        "transfer-encoding",
        "keep-alive",
        "te",
        "trailer",
        TICKET_HEADER,
        TRANSPORT_HEADER,
    }
)


@dataclass(frozen=True)
class Admitted:
    """An upgrade the proxy let through: where its calls go, and as whom."""

    path: str  # as the harness asked it, any /s/{session}/ prefix included
    headers: tuple[tuple[str, str], ...]  # what each of its calls is sent with
    session: str  # rollstream's session, for a refused message's record
    caller: Caller | None


#: Records a message refused on an admitted connection: (connection, status, message).
Refuse = Callable[[Admitted, int, str], None]


class WebSocketBridge:
    """The loopback server that ends WebSockets and sends their calls through the proxy."""

    def __init__(
        self, proxy_url: str, refuse: Refuse, max_message_bytes: int, host: str = "127.0.0.1"
    ) -> None:
        self.proxy_url = proxy_url.rstrip("/")
        self.refuse = refuse
        self.host = host
        self.port = 0
        # Twice the body limit: a larger call still reaches the HTTP path, which answers 413
        # and records it; only beyond does the connection close (1009), logged and counted.
        self.max_message_bytes = 2 * max_message_bytes
        self.tickets: OrderedDict[str, Admitted] = OrderedDict()
        self._secret = secrets.token_urlsafe(24)
        #: opened, calls, warmups, continued, refused, broken (a protocol error, or too large)
        self.counts: Counter[str] = Counter()
        self.open: set[web.WebSocketResponse] = set()
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    # -- the proxy's side ------------------------------------------------------------------

    def hand_over(
        self,
        flow: http.HTTPFlow,
        headers: Mapping[str, str],
        session: str,
        caller: Caller | None,
    ) -> None:
        """Send an admitted upgrade on to the bridge, its credentials kept here, not sent."""
        kept = tuple((k, v) for k, v in headers.items() if _for_calls(k))
        ticket = secrets.token_urlsafe(24)
        self.tickets[ticket] = Admitted(flow.request.path, kept, session, caller)
        while len(self.tickets) > MAX_TICKETS:
            self.tickets.popitem(last=False)
        for name, _ in kept:
            flow.request.headers.pop(name, None)
        flow.request.headers[TICKET_HEADER] = ticket
        flow.request.scheme, flow.request.host, flow.request.port = "http", self.host, self.port
        flow.request.path = "/"

    def sent(self, vouched: str | None) -> bool:
        """Whether a call's ``TRANSPORT_HEADER`` says the bridge sent it."""
        return vouched is not None and secrets.compare_digest(vouched, self._secret)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on a free loopback port."""
        app = web.Application()
        app.router.add_get("/", self._connection)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        # No overall timeout: an answer streams as long as the model writes.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        # No connection limit: each open WebSocket has at most one call in flight, and a limit
        # would hold one harness's call behind others' (aiohttp's default is 100).
        connector = aiohttp.TCPConnector(limit=0)
        self._client = aiohttp.ClientSession(timeout=timeout, connector=connector)

    async def stop(self) -> None:
        """Close every connection (going away: the harness reconnects), then the server."""
        for ws in list(self.open):
            with contextlib.suppress(Exception):  # a harness gone already
                await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"proxy stopping")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> WebSocketBridge:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- a connection ------------------------------------------------------------------------

    async def _connection(self, request: web.Request) -> web.StreamResponse:
        admitted = self.tickets.pop(request.headers.get(TICKET_HEADER, ""), None)
        if admitted is None:  # not through the proxy, or a ticket used already
            return web.Response(status=403, text="no ticket: connect through the interceptor")
        ws = web.WebSocketResponse(max_msg_size=self.max_message_bytes, compress=True)
        await ws.prepare(request)
        self.counts["opened"] += 1
        self.open.add(ws)
        # Read while answering: a harness that goes away mid-answer cuts its call (the proxy
        # records it cancelled) instead of the model sampling on for nobody.
        received: asyncio.Queue[aiohttp.WSMessage] = asyncio.Queue()
        serving = asyncio.create_task(self._serve(ws, admitted, received))
        try:
            async for message in ws:
                received.put_nowait(message)
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await serving
            self.open.discard(ws)
        return ws

    async def _serve(
        self,
        ws: web.WebSocketResponse,
        admitted: Admitted,
        received: asyncio.Queue[aiohttp.WSMessage],
    ) -> None:
        """Answer the connection's messages in the order they came."""
        last: Conversation | None = None
        while True:
            message = await received.get()
            if message.type is aiohttp.WSMsgType.TEXT:
                last = await self._message(ws, admitted, message.data, last)
            elif message.type is aiohttp.WSMsgType.BINARY:
                await self._refused(ws, admitted, "a WebSocket message must be text (JSON)")
            elif message.type is aiohttp.WSMsgType.ERROR:  # too large, or not WebSocket
                self.counts["broken"] += 1
                log.warning("WebSocket of session %s closed: %s", admitted.session, ws.exception())

    async def _message(
        self, ws: web.WebSocketResponse, admitted: Admitted, text: str, last: Conversation | None
    ) -> Conversation | None:
        """Answer one message; the connection's last response afterwards."""
        try:
            message = read_message(text)
        except WsMessageError as exc:
            await self._refused(ws, admitted, str(exc))
            return last
        if message["type"] != CREATE:  # an acknowledgement: nothing to answer
            return last
        try:
            body = http_request(message, last)
        except WsMessageError as exc:
            await self._refused(ws, admitted, str(exc))
            return last
        if "previous_response_id" in message and "previous_response_id" not in body:
            self.counts["continued"] += 1  # sent only the tail after the response it named
        if is_warmup(message) and "previous_response_id" not in body:
            self.counts["warmups"] += 1  # samples nothing: no call to make or record
            conversation, events = warmup(body)
            for event in events:
                await ws.send_str(_text(event))
            return conversation
        self.counts["calls"] += 1
        tracker = AnswerTracker(body)
        await self._call(ws, admitted, body, tracker)
        # A failed call leaves no response to name: a create naming one is refused upstream.
        return tracker.conversation if tracker.done else last

    async def _call(
        self,
        ws: web.WebSocketResponse,
        admitted: Admitted,
        body: dict[str, object],
        tracker: AnswerTracker,
    ) -> None:
        """One call through the proxy's HTTP path, its answer relayed event by event."""
        assert self._client is not None
        headers = dict(admitted.headers)
        headers.update(
            {
                "content-type": "application/json",
                "accept": "text/event-stream",
                TRANSPORT_HEADER: self._secret,
            }
        )
        url = self.proxy_url + admitted.path
        try:
            async with self._client.post(url, data=jsonfast.dumps(body), headers=headers) as got:
                if got.status != 200:
                    await ws.send_str(_text(error_from_http(got.status, await got.read())))
                    return
                parser = SSEParser()
                async for chunk in got.content.iter_any():
                    for event in parser.feed(chunk):
                        if not isinstance(event.data, dict):
                            continue  # a [DONE]: the events say where the answer ends
                        tracker.observe(event.data)
                        await ws.send_str(_text(event.data))
        except aiohttp.ClientError as exc:  # the proxy is stopping: the harness may retry
            if not tracker.done:
                await ws.send_str(_text(error_event(503, f"the call was cut: {exc}")))
            return
        if not tracker.done:
            message = "the answer ended before response.completed"
            await ws.send_str(_text(error_event(502, message)))

    async def _refused(self, ws: web.WebSocketResponse, admitted: Admitted, reason: str) -> None:
        self.counts["refused"] += 1
        log.warning("WebSocket message of session %s refused: %s", admitted.session, reason)
        self.refuse(admitted, 400, reason)
        await ws.send_str(_text(error_event(400, reason)))


def _for_calls(name: str) -> bool:
    lowered = name.lower()
    return lowered not in _UPGRADE_ONLY and not lowered.startswith(("sec-websocket-", "proxy-"))


def _text(event: dict[str, object]) -> str:
    return jsonfast.dumps(event).decode()
