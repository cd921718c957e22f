"""What the addon reads from and writes into mitmproxy's flows: headers, errors, bodies."""

from __future__ import annotations

import json
from typing import Any

from mitmproxy import http
from pydantic import SecretStr

from rollstream.interceptor.exact.upstream import CONTEXT_HEADER
from rollstream.interceptor.sessions import AFFINITY_HEADER, affinity_key, credential_headers
from rollstream.schemas import jsonfast

#: The flow metadata key holding a call's CallState.
STATE = "rollstream"
_CONTEXT_HEADER_BYTES = CONTEXT_HEADER.encode()


def headers_dict(headers: http.Headers) -> dict[str, str]:
    """``dict(headers)`` in one pass: mitmproxy's looks every name up again, a scan each."""
    grouped: dict[bytes, tuple[bytes, list[bytes]]] = {}
    for name, value in headers.fields:
        entry = grouped.setdefault(name.lower(), (name, []))
        entry[1].append(value)
    return {
        _native(name): ", ".join(_native(value) for value in values)
        for name, values in grouped.values()
    }


def _native(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # as mitmproxy's Headers give str


def upstream_message(response: http.Response) -> str:
    """The message of an upstream error answer (OpenAI's, Google's or plain text)."""
    text = response.get_text(strict=False) or ""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500] or f"upstream answered {response.status_code}"
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return text[:500]


def json_response(status: int, body: dict[str, Any]) -> http.Response:
    """A JSON answer to the harness."""
    return http.Response.make(status, jsonfast.dumps(body), {"content-type": "application/json"})


def sse_response(body: bytes) -> http.Response:
    """A whole event stream as one answer to the harness."""
    return http.Response.make(
        200, body, {"content-type": "text/event-stream", "cache-control": "no-cache"}
    )


def rewrite_credentials(
    flow: http.HTTPFlow, session: str | None, upstream_key: SecretStr | None
) -> str | None:
    """Take the session's credential and our own headers out; the context header's value.

    With a ``session`` (an LLM call), the upstream is told its hash (session affinity); with an
    ``upstream_key``, the upstream's own credential is set.
    """
    # One pass over the headers: popping an absent one costs a scan and a KeyError.
    present = {name.lower() for name, _ in flow.request.headers.fields}
    for header in credential_headers():
        if header.encode() in present:
            flow.request.headers.pop(header, None)
    context = None
    if _CONTEXT_HEADER_BYTES in present:
        context = flow.request.headers.pop(CONTEXT_HEADER, None)
    if session is not None:
        flow.request.headers[AFFINITY_HEADER] = affinity_key(session)
    if upstream_key is not None:
        flow.request.headers["authorization"] = f"Bearer {upstream_key.get_secret_value()}"
    return context
