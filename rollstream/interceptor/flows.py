"""What the addon reads from and writes into mitmproxy's flows: headers, errors, bodies."""

from __future__ import annotations

import json
from typing import Any

from mitmproxy import http

from rollstream.schemas import jsonfast

#: The flow metadata key holding a call's CallState.
STATE = "rollstream"


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
