"""The mitmproxy addon: wires mitmproxy's hooks to the translators and the recorder.

The logic lives in pure functions (``translate/``, ``recording``); this class only moves bytes
between mitmproxy's flow and them. Every LLM call ends in exactly one CallRecord, failed ones
included; what else passes is the proxy policy's to decide (``policy``): the allowlisted
routes are forwarded without a record, everything else is refused and recorded.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from mitmproxy import http
from mitmproxy.addonmanager import Loader
from mitmproxy.connection import ConnectionState

from rollstream.apis.adapters import (
    ADAPTER_BY_KIND,
    Adapter,
    adapter_for,
)
from rollstream.apis.chat import CaptureOptions, prepare_chat_request
from rollstream.apis.errors import TranslationError
from rollstream.apis.limits import clamp_output_tokens
from rollstream.apis.synthesize import chunks_from_answer
from rollstream.interceptor.callers import caller_from_headers
from rollstream.interceptor.counting import (
    COUNTING,
    answer_count_tokens,
    send_count_tokens,
)
from rollstream.interceptor.exact.upstream import ExactUpstream
from rollstream.interceptor.flows import (
    STATE,
    headers_dict,
    json_response,
    rewrite_credentials,
    sse_response,
    upstream_message,
)
from rollstream.interceptor.forward import is_passthrough
from rollstream.interceptor.gate import Gate
from rollstream.interceptor.policy import Decision, Route, decide, is_upgrade
from rollstream.interceptor.recorder import CallRecorder, Publish
from rollstream.interceptor.recording import ANONYMOUS, CallState
from rollstream.interceptor.registry import SessionRegistry
from rollstream.interceptor.served import ServedContext
from rollstream.interceptor.sessions import (
    SessionLedger,
    affinity_key,
    keyed_session,
    named_session,
    session_of,
)
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.interceptor.streaming import stream_function
from rollstream.interceptor.timeouts import TIMEOUT_HEADER, UpstreamDeadlines, upstream_cut
from rollstream.interceptor.websocket import TRANSPORT_HEADER, WebSocketBridge
from rollstream.schemas import ApiKind, Caller, ContextMode, jsonfast
from rollstream.schemas.calls import Transport

log = logging.getLogger(__name__)


class RollstreamAddon:
    """Intercepts LLM calls: translate, capture token ids, answer in the harness's API, record."""

    def __init__(
        self,
        settings: InterceptorSettings,
        publish: Publish,
        sessions: SessionRegistry | None = None,
        hash_key: bytes | None = None,
    ) -> None:
        self.settings = settings
        #: The HMAC key naming unregistered keys' sessions (``keyed_session``); without one
        #: (an addon of its own, in tests), this process's.
        self.hash_key = hash_key if hash_key is not None else secrets.token_bytes(32)
        # Strict mode serves only these; outside it, their keys are recorded as their ids.
        # (Not `or`: an empty registry is falsy.)
        self.sessions = sessions if sessions is not None else SessionRegistry()
        self.ledger = SessionLedger(settings.recent_contexts)
        self.recorder = CallRecorder(self.ledger, publish)
        self.capture = CaptureOptions(
            backend=settings.backend,
            top_logprobs=settings.top_logprobs,
            upstream_model=settings.upstream_model,
        )
        self.in_flight: Counter[str] = Counter()
        self.live: dict[str, CallState] = {}  # by call id: calls not yet recorded
        self.policy_version = settings.policy_version
        self.gate = Gate()
        self.refused: Counter[int] = Counter()  # requests the proxy policy refused, by status
        self.deadlines = UpstreamDeadlines(settings.upstream_timeout_s)
        self.exact = ExactUpstream(settings, self.sessions.context)
        self.served = ServedContext(settings)
        #: Where WebSocket upgrades are ended (``websocket``); None: refused (the proxy sets it).
        self.websockets: WebSocketBridge | None = None

    # -- hooks ---------------------------------------------------------------------------

    def load(self, loader: Loader) -> None:
        """Keep mitmproxy's master: cutting a slow upstream goes through its proxy server."""
        self.deadlines.master = loader.master

    async def request(self, flow: http.HTTPFlow) -> None:
        """Translate an LLM call for the upstream, forward an allowlisted route, refuse the rest."""
        headers = headers_dict(flow.request.headers)
        session, raw = session_of(headers, flow.request.path)
        if is_passthrough(flow):  # forward mode's other traffic: not the upstream's
            rewrite_credentials(flow, None, self.settings.upstream_api_key)
            return
        decision = decide(flow.request.method, raw, is_upgrade(flow.request.headers))
        if decision.route is Route.REFUSED:
            self._refuse(flow, decision, session)
            return
        path = decision.path  # what the upstream reads, so what goes upstream
        llm_call = decision.route in (Route.LLM_CALL, Route.WEBSOCKET)
        unknown = llm_call and session not in self.sessions
        if unknown and self.settings.strict_sessions:
            self._unknown_session(flow, path, session)
            return
        if unknown and session is not None and not named_session(headers, flow.request.path):
            # Any key is served outside strict mode, but it may be a real credential: its
            # session is named by its keyed hash, so the key itself is recorded nowhere.
            session = keyed_session(self.hash_key, session)
        if decision.route is Route.WEBSOCKET:  # its calls come back through here, one by one
            self._websocket(flow, decision, headers, session)
            return
        if llm_call:
            await self.gate.wait()  # held while the trainer swaps weights
        asked_context = rewrite_credentials(
            flow, session if llm_call else None, self.settings.upstream_api_key
        )
        flow.request.path = path
        if decision.route is Route.COUNT_TOKENS:
            assert decision.adapter is not None
            send_count_tokens(flow, decision.adapter, self.settings.upstream_model)
            return
        adapter = decision.adapter
        if adapter is None:  # an auxiliary route on the allowlist: forwarded
            return
        size = len(flow.request.raw_content or b"")
        if size > self.settings.max_body_bytes:
            self._reject(flow, adapter, None, 413, f"request body of {size} bytes is too large")
            # A finished flow lives on until the cyclic GC collects it, and its body with it:
            # three 50 MB bodies at a time kept RSS at 420-690 MB, against 260-330 without.
            flow.request.raw_content = b""
            return
        try:
            body = jsonfast.loads(flow.request.get_content(strict=False) or b"")
        except ValueError as exc:
            self._reject(flow, adapter, session, 400, f"malformed JSON body: {exc}")
            return
        if isinstance(body, dict):
            body = adapter.harness_request(body)  # Gemini names its model in the path
        state = CallState(
            adapter.kind, session or ANONYMOUS, body if isinstance(body, dict) else {}
        )
        state.caller = caller_from_headers(flow.request.headers)
        vouched = flow.request.headers.pop(TRANSPORT_HEADER, None)  # never sent upstream
        if self.websockets is not None and self.websockets.sent(vouched):
            state.transport = "websocket"
        flow.metadata[STATE] = state
        self.live[state.call_id] = state
        self.in_flight[state.session] += 1
        try:
            if not isinstance(body, dict):
                raise TranslationError("the request body must be a JSON object")
            model = self.settings.upstream_model or str(body.get("model") or "")
            chat = adapter.to_chat(body, model)
            upstream, state.asked = prepare_chat_request(chat, self.capture)
        except TranslationError as exc:
            state.fail("invalid_request", str(exc), 400, False)
            flow.response = json_response(400, adapter.error(400, str(exc)))
            return
        self.served.read_if_due()
        adjusted = clamp_output_tokens(upstream, self.served.max_model_len)
        if adjusted is not None:
            state.adjusted.append(adjusted)
        state.stream = bool(upstream.get("stream"))
        if state.stream and self.settings.stream_mode == "synthesize":
            # Asked whole, the upstream returns every capture field; the stream is rebuilt.
            state.synthesized = True
            upstream["stream"] = False
            upstream.pop("stream_options", None)
        state.upstream_request = upstream
        state.context, completion = await self.exact.prepare_off_loop(
            state.session, upstream, asked_context
        )
        if completion is not None:  # known already, should the upstream not echo them
            state.capture.set_prompt_token_ids(completion["prompt"])
        flow.request.path = "/v1/completions" if completion else "/v1/chat/completions"
        flow.request.headers.pop("accept-encoding", None)  # we read the answer
        flow.request.set_content(jsonfast.dumps(completion or upstream))
        flow.request.headers["content-type"] = "application/json"
        # What the call is sampled with: a weight sync after this moment does not concern it.
        state.policy_version = self.policy_version
        self.deadlines.start(flow)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Stream a successful streamed answer through, translating event by event."""
        self.deadlines.stop(flow)
        state: CallState | None = flow.metadata.get(STATE)
        if state is None or flow.response is None or not state.stream or state.synthesized:
            return
        if flow.response.status_code >= 400:
            return  # the whole error body is needed to translate it
        flow.response.stream = self._stream_function(state, ADAPTER_BY_KIND[state.api])
        flow.response.headers.pop("content-length", None)

    def response(self, flow: http.HTTPFlow) -> None:
        """Translate a whole answer (or an upstream error) and record the call."""
        self.deadlines.stop(flow)
        if flow.metadata.get(COUNTING):  # not an LLM call: translated, never recorded
            return answer_count_tokens(flow)
        state: CallState | None = flow.metadata.get(STATE)
        if state is None or flow.response is None or state.recorded:
            return
        adapter = ADAPTER_BY_KIND[state.api]
        if flow.response.status_code >= 400:
            message = upstream_message(flow.response)
            status = flow.response.status_code
            timed_out = TIMEOUT_HEADER in flow.response.headers  # our own 504, see timeouts
            kind = "upstream_timeout" if timed_out else "upstream_http"
            state.fail(kind, message, status, status >= 500 or status == 429)
            flow.response = json_response(status, adapter.error(status, message))
        elif (not state.stream or state.synthesized) and state.error is None:
            self._whole_answer(flow, state, adapter)
        self._record(state)

    def error(self, flow: http.HTTPFlow) -> None:
        """The upstream could not be reached, or a side hung up: record the call.

        Failed or cancelled, by the side that went away; complete if the harness had already
        been handed the whole answer.
        """
        self.deadlines.stop(flow)
        state: CallState | None = flow.metadata.get(STATE)
        if state is None or state.recorded:
            return
        message = flow.error.msg if flow.error else "connection error"
        cut = upstream_cut(flow)
        if state.delivered:
            # The harness had the whole answer; a connection closed after that loses nothing: a
            # harness may hang up on its terminal event before the upstream ends its body (Codex
            # closes on response.completed while vLLM still ends its chunked answer).
            pass
        elif not flow.client_conn.state & ConnectionState.CAN_READ:
            state.cancel(message)  # the harness went away, streamed or waiting for an answer
        elif flow.response is not None and state.stream:
            # The harness is still connected: the upstream broke off mid-stream.
            state.fail("upstream_stream_broken", message, 502, True)
        elif cut is not None:  # we gave up on connecting, or closed a silent TLS upstream
            status, message = cut
            state.fail("upstream_timeout", message, status, True)
        else:
            state.fail("upstream_unreachable", message, 502, True)
        self._record(state)

    # -- internals -------------------------------------------------------------------------

    def _whole_answer(self, flow: http.HTTPFlow, state: CallState, adapter: Adapter) -> None:
        """Capture a whole upstream answer and give it to the harness, replayed if it streams."""
        assert flow.response is not None
        try:
            answer = jsonfast.loads(flow.response.get_content(strict=False) or b"")
            if _exact(state):
                answer = self.exact.chat_answer(answer, state)
            state.capture.add_response(answer)
            state.response = answer
            if state.synthesized:
                flow.response = sse_response(_replay(adapter, state, answer))
            else:
                translated = adapter.answer(answer, state.harness_request, state.asked)
                flow.response = json_response(200, translated)
        except Exception as exc:  # an answer of another shape: the call fails, recorded
            state.fail("bad_upstream_answer", str(exc), 502, True)
            flow.response = json_response(502, adapter.error(502, str(exc)))

    def _stream_function(
        self, state: CallState, adapter: Adapter
    ) -> Callable[[bytes], Iterable[bytes]]:
        converter = self.exact.stream(state) if _exact(state) else None
        return stream_function(state, adapter.stream(state.harness_request, state.asked), converter)

    def record_unfinished(self, message: str) -> int:
        """Record every call still in flight as failed (the proxy is stopping); how many.

        mitmproxy's shutdown cancels its connections without running any hook: a call cut that
        way would otherwise leave no record.
        """
        unfinished = list(self.live.values())
        for state in unfinished:
            state.fail("interceptor_stopped", message, 503, True)
            self._record(state)
        return len(unfinished)

    def _record(self, state: CallState) -> None:
        state.recorded = True
        self.live.pop(state.call_id, None)
        self.in_flight[state.session] -= 1
        if self.in_flight[state.session] <= 0:
            del self.in_flight[state.session]
        model = str(state.harness_request.get("model") or "")
        self.recorder.record(state, model, self.policy_version)
        try:
            self.exact.remember(state)
        except Exception:  # the next call then falls back to the server's rendering
            log.exception("exact context could not keep call %s", state.call_id)

    def _reject(
        self,
        flow: http.HTTPFlow,
        adapter: Adapter,
        session: str | None,
        status: int,
        message: str,
        kind: str = "invalid_request",
    ) -> None:
        """Answer a call that cannot go upstream, and record it."""
        flow.response = json_response(status, adapter.error(status, message))
        caller = caller_from_headers(flow.request.headers)
        self.record_rejected(adapter.kind, session, caller, status, message, kind)

    def record_rejected(
        self,
        api: ApiKind,
        session: str | None,
        caller: Caller | None,
        status: int,
        message: str,
        kind: str = "invalid_request",
        transport: Transport = "http",
    ) -> None:
        """Record a call that was answered with an error and never went upstream."""
        state = CallState(api, session or ANONYMOUS, {"rejected": message})
        state.caller, state.transport = caller, transport
        state.fail(kind, message, status, False)
        self.in_flight[state.session] += 1
        self._record(state)

    def _websocket(
        self, flow: http.HTTPFlow, decision: Decision, headers: dict[str, str], session: str | None
    ) -> None:
        """An admitted WebSocket upgrade: to the bridge, or refused where there is none.

        Forward mode refuses it (Codex then falls back to HTTP): its calls would come back to a
        proxy that takes only absolute URLs.
        """
        if self.websockets is None or self.settings.mode == "forward":
            reason = "WebSocket is served in reverse mode only: use HTTP"
            refused = Decision(Route.REFUSED, decision.path, decision.adapter, 501, reason)
            self._refuse(flow, refused, session)
            return
        caller = caller_from_headers(flow.request.headers)
        self.websockets.hand_over(flow, headers, session or ANONYMOUS, caller)

    def _refuse(self, flow: http.HTTPFlow, decision: Decision, session: str | None) -> None:
        """A request the policy refuses: the caller's API error, a record, a log line."""
        assert decision.adapter is not None
        self.refused[decision.status] += 1
        log.warning(
            "refused %s %s: %s",
            flow.request.method,
            decision.path.partition("?")[0],
            decision.reason,
        )
        known = session if session in self.sessions else None  # never an unknown credential
        self._reject(flow, decision.adapter, known, decision.status, decision.reason, "refused")

    def _unknown_session(self, flow: http.HTTPFlow, path: str, session: str | None) -> None:
        """Strict mode: a 401 for a session nobody registered, recorded without its credential.

        An unknown key may be a real secret sent here by mistake: the record (session
        ``anonymous``) and the message name only its hash.
        """
        adapter = adapter_for(path)
        assert adapter is not None
        who = f" (hash {affinity_key(session)})" if session else ""
        message = f"unknown session{who}: not registered with the interceptor"
        self._reject(flow, adapter, None, 401, message, kind="unknown_session")


def _exact(state: CallState) -> bool:
    return state.context is not None and state.context.mode is ContextMode.EXACT


def _replay(adapter: Adapter, state: CallState, answer: dict[str, Any]) -> bytes:
    """A whole answer as the harness's stream, through the translator a real stream uses."""
    translator = adapter.stream(state.harness_request, state.asked)
    events = [e for chunk in chunks_from_answer(answer) for e in translator.feed(chunk)]
    return b"".join(e.encode() for e in events + translator.finish())
