"""The admin port behind its bearer token: one interceptor, and a pool with its workers.

Every route of the table (``admin_routes``) but /health refuses a caller without the token,
with no effect (a session stays unregistered and its calls refused in strict mode, the gate
open, the policy version unchanged); /metrics also takes its own token, which controls
nothing; a pool gives its workers the token and asks them with it, and a worker's own admin
port refuses a caller without it as the pool's does.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from rollstream.interceptor.admin import admin_routes
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE
from tests.interceptor.pool_stack import (
    MODEL,
    chat,
    client,
    interceptor_pool,
    metrics,
    scripted_upstream,
    summed,
)

pytestmark = pytest.mark.integration

#: Every guarded route of the table, with a body that would have an effect.
ROUTES = [
    ("GET", "/metrics", None),
    ("GET", "/sessions/s-x", None),
    ("PUT", "/sessions/s-x", {"context": "ordinary"}),
    ("DELETE", "/sessions/s-x", None),
    ("POST", "/admin/pause", {"drain_timeout_s": 1}),
    ("POST", "/admin/resume", None),
    ("POST", "/admin/policy-version", {"version": 9}),
]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_cases_cover_every_route_of_the_table() -> None:
    table = {(r.method, r.path) for r in admin_routes(_Handlers())}  # type: ignore[arg-type]
    guarded = {(m, p.replace("{session}", "s-x")) for m, p in table if p != "/health"}
    assert guarded == {(m, p) for m, p, _ in ROUTES}


class _Handlers:
    """Any attribute is a handler: only the route table is read."""

    def __getattr__(self, name: str) -> object:
        async def handler(request: web.Request) -> web.Response:
            return web.json_response({})

        return handler


@pytest.fixture
async def upstream(tmp_path: Path) -> AsyncIterator[str]:
    async with scripted_upstream(tmp_path / "backend") as url:
        yield url


async def _refused_everywhere(http: aiohttp.ClientSession, admin_url: str, token: str) -> None:
    """Every guarded route refuses no token, another token and a token sent wrongly."""
    for headers in ({}, _bearer("x" + token), {"Authorization": token}, _bearer(token[:-1])):
        for method, path, body in ROUTES:
            async with http.request(
                method, f"{admin_url}{path}", json=body, headers=headers
            ) as reply:
                assert reply.status == 401, (method, path, headers)
                assert (await reply.json())["error"]["type"] == "unauthorized"


async def test_the_admin_port_takes_only_its_token(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    upstream: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token, scrape = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    settings = InterceptorSettings(
        upstream=upstream,
        port=0,
        admin_port=0,
        upstream_model=MODEL,
        follow_policy=False,
        strict_sessions=True,
        admin_token=SecretStr(token),
        metrics_token=SecretStr(scrape),
    )
    paths = StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE)
    with caplog.at_level(logging.DEBUG):
        async with (
            Interceptor(settings, kafka_settings, PublisherSettings(), paths) as proxy,
            client() as http,
        ):
            admin = proxy.admin_url
            await _refused_everywhere(http, admin, token)
            # No effect: s-x unregistered (strict: its call refused), no pause, version 0.
            assert (await chat(http, proxy.url, "s-x"))[0] == 401
            assert not proxy.addon.gate.paused and proxy.addon.policy_version == 0
            async with http.get(f"{admin}/health") as reply:
                assert reply.status == 200
            # The scrape token reads the metrics and controls nothing.
            async with http.get(f"{admin}/metrics", headers=_bearer(scrape)) as reply:
                assert reply.status == 200 and "rollstream_calls_total" in await reply.text()
            async with http.put(f"{admin}/sessions/s-x", headers=_bearer(scrape)) as reply:
                assert reply.status == 401
            # The token does everything.
            async with http.put(f"{admin}/sessions/s-x", headers=_bearer(token)) as reply:
                assert reply.status == 200
            assert (await chat(http, proxy.url, "s-x"))[0] == 200
            async with http.post(
                f"{admin}/admin/policy-version", json={"version": 9}, headers=_bearer(token)
            ) as reply:
                assert reply.status == 200 and proxy.addon.policy_version == 9
    assert token not in caplog.text and scrape not in caplog.text
    assert "refused PUT /sessions/s-x" in caplog.text


async def test_a_pool_and_its_workers_take_only_the_pool_s_token(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, upstream: str
) -> None:
    token = secrets.token_urlsafe(16)
    async with (
        interceptor_pool(
            kafka_settings, upstream, strict_sessions=True, admin_token=SecretStr(token)
        ) as pool,
        client() as http,
        client(_bearer(token)) as holder,
    ):
        await _refused_everywhere(http, pool.admin_url, token)
        for worker in pool.workers:  # each worker was given the pool's token
            await _refused_everywhere(http, worker.admin_url, token)
        assert (await chat(http, pool.url, "s-x"))[0] == 401  # nothing was registered
        # With the token: the pool registers on a worker, pauses and resumes them all, and
        # scrapes their metrics, asking each with the token.
        async with holder.put(f"{pool.admin_url}/sessions/s-x") as reply:
            assert reply.status == 200
            registered = await reply.json()
        assert (await chat(http, registered["url"], "s-x"))[0] == 200
        async with holder.post(f"{pool.admin_url}/admin/pause", json={}) as reply:
            assert reply.status == 200
            assert [w["paused"] for w in (await reply.json())["workers"]] == [1, 1]
        async with holder.post(f"{pool.admin_url}/admin/resume") as reply:
            assert reply.status == 200
        values = await metrics(holder, pool.admin_url)
        # The refused call is recorded too (as rejected), the registered one succeeded.
        assert summed(values, "rollstream_calls_total") == 2
        assert summed(values, "rollstream_calls_failed_total") == 1
        assert summed(values, "rollstream_paused") == 0
