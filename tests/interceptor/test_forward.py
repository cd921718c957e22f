"""Forward-proxy mode without a network: re-targeting, and what happens to other traffic."""

from __future__ import annotations

import json

import pytest
from mitmproxy import http
from mitmproxy.test import tflow
from pydantic import SecretStr

from rollstream.errors import ConfigurationError
from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.forward import (
    ForwardAddon,
    OtherTraffic,
    Target,
    is_llm_path,
    retarget,
    upstream_target,
)
from rollstream.interceptor.sessions import affinity_key, keyed_session
from rollstream.interceptor.settings import InterceptorSettings

UPSTREAM = Target("http", "127.0.0.1", 8000)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", Target("http", "127.0.0.1", 8000)),
        ("http://127.0.0.1:8000/", Target("http", "127.0.0.1", 8000)),
        ("https://vllm.internal", Target("https", "vllm.internal", 443)),
        ("http://[::1]:9000", Target("http", "::1", 9000)),
        ("vllm.internal:8443", Target("https", "vllm.internal", 8443)),
    ],
)
def test_upstream_target(url: str, expected: Target) -> None:
    assert upstream_target(url) == expected


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1", "tcp://127.0.0.1:8000", "http://bad host", ""]
)
def test_upstream_target_rejects(url: str) -> None:
    with pytest.raises(ConfigurationError):
        upstream_target(url)


@pytest.mark.parametrize(
    ("path", "llm"),
    [
        ("/v1/chat/completions", True),
        ("/v1/messages", True),
        ("/v1/messages?beta=true", True),
        ("/v1/messages/count_tokens?beta=true", True),
        ("/v1/responses", True),
        ("/chat/completions", True),
        ("/s/sess-1/v1/messages", True),
        ("/v1/models", False),
        ("/api/event_logging/batch", False),
        ("/v1/responses/resp_123", False),
        ("/", False),
    ],
)
def test_llm_paths_are_retargeted_and_nothing_else(path: str, llm: bool) -> None:
    assert is_llm_path(path) is llm
    assert retarget(path, UPSTREAM) == (UPSTREAM if llm else None)


HASH_KEY = b"k" * 32


def _flow(url: str, headers: dict[str | bytes, str | bytes], body: object = None) -> http.HTTPFlow:
    content = json.dumps(body).encode() if body is not None else b""
    method = "POST" if body is not None else "GET"
    request = http.Request.make(method, url, content, headers)
    request.headers["host"] = request.host  # as a client sends it
    return tflow.tflow(req=request)


async def _through(
    flow: http.HTTPFlow, other: OtherTraffic = "forward", key: str | None = None
) -> list[bytes]:
    """The request hooks in mitmproxy's order: requestheaders, then request, addon first.

    Returns the record values the addon published (none is expected before a response).
    """
    settings = InterceptorSettings(
        upstream="http://127.0.0.1:8000",
        mode="forward",
        other_traffic=other,
        upstream_api_key=SecretStr(key) if key else None,
    )
    records: list[bytes] = []
    addon, forward = (
        RollstreamAddon(settings, lambda _key, value: records.append(value), hash_key=HASH_KEY),
        ForwardAddon(settings.upstream, other),
    )
    forward.requestheaders(flow)
    await addon.request(flow)
    forward.request(flow)
    return records


async def test_llm_call_goes_upstream_whatever_host_was_addressed() -> None:
    body = {"model": "claude", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    flow = _flow("https://api.anthropic.com/v1/messages", {"x-api-key": "sess-1"}, body)
    await _through(flow, key="upstream-key")
    request = flow.request
    assert (request.scheme, request.host, request.port) == ("http", "127.0.0.1", 8000)
    assert request.path == "/v1/chat/completions"  # translated by the addon, as in reverse mode
    assert request.headers["host"] == "127.0.0.1:8000"
    assert "x-api-key" not in request.headers
    assert request.headers["authorization"] == "Bearer upstream-key"
    # Not the key, nor the session its keyed hash names: a hash of that, for affinity upstream.
    session = keyed_session(HASH_KEY, "sess-1")
    assert request.headers["x-rollstream-session-hash"] == affinity_key(session)


async def test_other_traffic_is_forwarded_unchanged() -> None:
    url = "https://statsig.anthropic.com/s/abc/v1/rgstr"
    flow = _flow(url, {"Authorization": "Bearer real-token", "x-api-key": "k"})
    await _through(flow, key="upstream-key")
    request = flow.request
    assert request.url == url  # neither re-targeted nor stripped of its /s/ segment
    # The harness's own credentials go where it sent them; the upstream's key never does.
    assert request.headers.get_all("authorization") == ["Bearer real-token"]
    assert request.headers["x-api-key"] == "k"
    assert "x-rollstream-session-hash" not in request.headers
    assert flow.response is None


async def test_other_traffic_can_be_blocked() -> None:
    flow = _flow("https://api.openai.com/v1/models", {"Authorization": "Bearer sess-1"})
    records = await _through(flow, other="block")
    assert flow.response is not None and flow.response.status_code == 403
    assert b"api.openai.com" in (flow.response.content or b"")
    assert records == []


async def test_llm_calls_are_not_blocked() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    flow = _flow("https://api.openai.com/v1/chat/completions", {"Authorization": "Bearer s"}, body)
    await _through(flow, other="block")
    assert flow.response is None and flow.request.host == "127.0.0.1"
