"""Forward-proxy mode: LLM calls addressed to any provider are re-targeted to the upstream.

In forward mode mitmproxy is an ordinary HTTP proxy (``HTTPS_PROXY``) that intercepts TLS with
its own CA. A harness keeps addressing its real provider (``https://api.anthropic.com``,
``https://api.openai.com``); every call on a path the addon recognises as an LLM call is sent to
the configured upstream instead, keeping its path, so the provider never sees it. Everything
else (telemetry, update checks) is either forwarded to where it was going, unchanged and
unrecorded, or refused, as ``other_traffic`` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mitmproxy import http
from mitmproxy.net import server_spec

from rollstream.errors import ConfigurationError
from rollstream.interceptor.policy import Route, decide
from rollstream.interceptor.sessions import credential_headers, session_of

OtherTraffic = Literal["forward", "block"]
_PASSTHROUGH = "rollstream.forward.passthrough"


@dataclass(frozen=True)
class Target:
    """Where a request goes: scheme, host and port (the path is the request's own)."""

    scheme: str
    host: str
    port: int


def upstream_target(upstream: str) -> Target:
    """The upstream URL as a target, parsed as mitmproxy parses ``reverse:URL``."""
    try:
        scheme, (host, port) = server_spec.parse(upstream, default_scheme="https")
    except ValueError as exc:
        raise ConfigurationError(f"invalid upstream {upstream!r}: {exc}") from exc
    if scheme not in ("http", "https"):
        raise ConfigurationError(f"the upstream must be http or https, not {scheme}")
    return Target(scheme, host, port)


def is_llm_path(path: str) -> bool:
    """Whether the addon treats a request path as an LLM call (or token counting).

    Decided by the proxy policy on the path as an upstream would read it: an encoded LLM
    path to a third party is ours too (recorded), not passed through unseen.
    """
    _, bare = session_of({}, path)  # a /s/{session}/ prefix does not hide the API path
    return decide("POST", bare).route in (Route.LLM_CALL, Route.COUNT_TOKENS)


def is_passthrough(flow: http.HTTPFlow) -> bool:
    """Whether ``flow`` is other traffic forwarded to where it was going (not the upstream's)."""
    return _PASSTHROUGH in flow.metadata


def retarget(path: str, upstream: Target) -> Target | None:
    """Where a request on ``path`` must go instead: the upstream for LLM calls, else None."""
    return upstream if is_llm_path(path) else None


def blocked_response(host: str) -> http.Response:
    """The answer to non-LLM traffic when ``other_traffic`` is ``block``."""
    body = f"rollstream forward proxy: traffic to {host} other than LLM calls is blocked\n"
    return http.Response.make(403, body.encode(), {"content-type": "text/plain"})


class ForwardAddon:
    """Re-targets LLM calls to the upstream; forwards or blocks everything else.

    Must be added *after* RollstreamAddon: its ``requestheaders`` hook runs before any
    ``request`` hook anyway, and its ``request`` hook must run after RollstreamAddon's, which
    strips credentials (and may add the upstream's key) on every request.
    """

    def __init__(self, upstream: str, other_traffic: OtherTraffic = "forward") -> None:
        self.upstream = upstream_target(upstream)
        self.other_traffic = other_traffic

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Re-target an LLM call; remember what other traffic looked like, or refuse it."""
        request = flow.request
        target = retarget(request.path, self.upstream)
        if target is not None:
            # Scheme first: the host and port setters rebuild the Host header from it.
            request.scheme = target.scheme
            request.host = target.host
            request.port = target.port
            return
        if self.other_traffic == "block":
            flow.response = blocked_response(request.pretty_host)
            return
        kept = [(k, v) for k in credential_headers() for v in request.headers.get_all(k)]
        flow.metadata[_PASSTHROUGH] = (request.path, kept)

    def request(self, flow: http.HTTPFlow) -> None:
        """Undo RollstreamAddon's rewrite on traffic that is not ours to change."""
        saved: tuple[str, list[tuple[str, str]]] | None = flow.metadata.get(_PASSTHROUGH)
        if saved is None:
            return
        # RollstreamAddon drops the harness's credential and may add the upstream's key; the
        # upstream's key must never reach a third party, and the harness's own headers are
        # what it meant to send there.
        path, credentials = saved
        flow.request.path = path
        for name in credential_headers():
            flow.request.headers.pop(name, None)
        for name, value in credentials:
            flow.request.headers.add(name, value)
