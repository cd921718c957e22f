"""JSON error bodies for the errors mitmproxy itself answers (upstream unreachable, timeouts).

mitmproxy writes those as HTML from ``make_error_response`` before any addon hook can step in,
so an SDK would see an unparseable 502. The replacement body is valid in all the formats
harnesses parse: Anthropic's (``type: error`` with ``error.type`` and ``error.message``),
OpenAI's (``error.message``, ``error.type``, ``error.code``) and Google's (``error.code``,
``error.message``, ``error.status``).
"""

from __future__ import annotations

import json

from mitmproxy import http, version
from mitmproxy.net.http import http1
from mitmproxy.proxy.layers.http import _http1

from rollstream.apis.gemini import gemini_status

_ERROR_TYPES = {502: "api_error", 503: "overloaded_error", 504: "api_error"}

TIMEOUT_PREFIX = "upstream timeout: "
"""Starts the reason of a connect we cancelled for taking too long (see :mod:`timeouts`).

mitmproxy answers every failed connect with a 502; one we gave up on is a gateway timeout.
"""


def json_error_body(status: int, message: str) -> bytes:
    """An error body Anthropic, OpenAI and Gemini clients all parse."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return json.dumps(
        {
            "type": "error",
            "error": {
                "type": kind,
                "message": f"rollstream: {message}",
                "code": status,
                "param": None,
                "status": gemini_status(status),
            },
        }
    ).encode()


def _make_json_error_response(status_code: int, message: str = "") -> bytes:
    if message.startswith(TIMEOUT_PREFIX):
        status_code, message = 504, message.removeprefix(TIMEOUT_PREFIX)
    response = http.Response.make(
        status_code,
        json_error_body(status_code, message or "upstream error"),
        http.Headers(Server=version.MITMPROXY, Connection="close", Content_Type="application/json"),
    )
    assembled: bytes = http1.assemble_response(response)
    return assembled


def install() -> None:
    """Make mitmproxy answer its own errors in JSON (idempotent)."""
    _http1.make_error_response = _make_json_error_response
