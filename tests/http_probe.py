"""The status an HTTP URL answers, with or without a bearer token (no client library needed)."""

from __future__ import annotations

import urllib.error
import urllib.request


def status_of(url: str, token: str | None = None) -> int:
    """GET ``url`` (with ``Authorization: Bearer token`` if given); the answer's status."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code
