"""Generated requests at the admin port: never a crash, never an effect without the token.

The admin application as the interceptor serves it (its routes behind its tokens, over a real
addon and publisher), on 127.0.0.1. Hypothesis draws the method, the path (the routes, odd
spellings of them, anything), the Authorization header (none, the token, near misses, other
schemes, anything) and the body (none, bytes, JSON). Without the token every answer is a 401 but
``/health``'s and nothing changes; with it, answers are never a server error.
"""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.admin import AdminApp
from rollstream.interceptor.registry import SessionRegistry
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.settings import KafkaSettings
from tests.interceptor.published import Published
from tests.strategies import PATH_CHARS, header_values, json_values

TOKEN = "admin-fuzz-token-0123456789abcdef"
SCRAPE = "scrape-fuzz-token-0123456789abcdef"
ROUTES = [
    "/health",
    "/metrics",
    "/sessions/s-1",
    "/admin/pause",
    "/admin/resume",
    "/admin/policy-version",
]

Client = TestClient[Any, Any]


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[Client, RollstreamAddon]]:
    addon = RollstreamAddon(InterceptorSettings(), Published())
    publisher = CapturePublisher(KafkaSettings(), PublisherSettings(), "events", tmp_path)
    interceptor = InterceptorSettings(admin_token=SecretStr(TOKEN), metrics_token=SecretStr(SCRAPE))
    app = AdminApp(addon, publisher).app(interceptor)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client, addon


paths = st.one_of(
    st.sampled_from(ROUTES),
    st.sampled_from(ROUTES).map(lambda p: p.upper()),
    st.sampled_from(ROUTES).map(lambda p: p + "/"),
    st.sampled_from(ROUTES).map(lambda p: "/" + p),
    st.text(PATH_CHARS, max_size=40).map(lambda t: "/sessions/" + t.replace("/", "") or "x"),
    st.text(PATH_CHARS, max_size=60).map(lambda t: "/" + t),
)
authorizations = st.one_of(
    st.none(),
    st.just(f"Bearer {TOKEN}"),
    st.just(f"Bearer {SCRAPE}"),
    st.sampled_from([f"Bearer {TOKEN[:-1]}", f"bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN]),
    header_values(80),
)
bodies = st.one_of(
    st.none(),
    st.binary(max_size=200),
    json_values(),
    st.fixed_dictionaries(
        {},
        optional={
            "drain_timeout_s": json_values(),
            "lease_s": json_values(),
            "version": json_values(),
            "context": json_values(),
            "timeout_s": json_values(),
        },
    ),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(["GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
    path=paths,
    authorization=authorizations,
    body=bodies,
)
async def test_no_request_crashes_the_admin_port_or_acts_without_the_token(
    admin: tuple[Client, RollstreamAddon],
    method: str,
    path: str,
    authorization: str | None,
    body: Any,
) -> None:
    client, addon = admin
    headers = {} if authorization is None else {"Authorization": authorization}
    kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
    logging.getLogger("rollstream.http_auth").disabled = True  # a refusal per example
    try:
        base = str(client.make_url("")).rstrip("/")  # a full URL: "//x" is no host here
        async with client.session.request(
            method, f"{base}{path}", headers=headers, **kwargs
        ) as reply:
            await reply.read()
            status = reply.status
    finally:
        logging.getLogger("rollstream.http_auth").disabled = False
    assert status < 500, (method, path, authorization, body)
    admitted = authorization is not None and authorization.strip() in (
        f"Bearer {TOKEN}",
        f"bearer {TOKEN}",
    )
    scraper = path == "/metrics" and authorization == f"Bearer {SCRAPE}"
    if not admitted and not scraper and path != "/health":
        assert status == 401, (method, path, authorization)
        assert len(addon.sessions) == 0
        assert not addon.gate.paused
        assert addon.policy_version == 0
    # Undo what an admitted request did, for the next example.
    addon.gate.resume()
    addon.policy_version = 0
    addon.sessions = SessionRegistry()


async def test_an_oversized_body_is_refused_without_a_crash(
    admin: tuple[Client, RollstreamAddon],
) -> None:
    client, addon = admin
    body = b"{" + b" " * (3 * 1024 * 1024) + b"}"
    async with client.post("/admin/pause", data=io.BytesIO(body)) as reply:
        assert reply.status == 401
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with client.post("/admin/pause", data=io.BytesIO(body), headers=headers) as reply:
        assert reply.status == 413
    assert not addon.gate.paused
