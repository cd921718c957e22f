"""Every control plane refuses every call without its token, with no effect and no leak.

A strict interceptor with its admin token and a node with its API token, both real, on
127.0.0.1. Each is sent a corpus of requests: every route of its table, unknown and odd
paths, each with no token, another plane's token, a near miss, the token in the wrong scheme
or header, and bodies that would have an effect. Counted afterwards: answers other than 401
(0 allowed but ``/health``), effects (a session registered, a pause, a policy version, a task
on the topic: 0), tokens in the logs (0). The row goes into the fault table.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE
from tests.fault_table import ChaosReport
from tests.harness_stack import MODEL, scripted_interceptor
from tests.kafka_reading import records_produced

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ADMIN_ROUTES = [
    ("GET", "/metrics"),
    ("GET", "/sessions/victim"),
    ("PUT", "/sessions/victim"),
    ("DELETE", "/sessions/victim"),
    ("POST", "/admin/pause"),
    ("POST", "/admin/resume"),
    ("POST", "/admin/policy-version"),
]
NODE_ROUTES = [
    ("POST", "/tasks"),
    ("GET", "/tasks/victim"),
    ("DELETE", "/tasks/victim"),
    ("GET", "/metrics"),
]
#: Paths no route has, and ways of spelling a guarded one: refused before any routing.
ODD_PATHS = [
    ("GET", "/"),
    ("GET", "/admin"),
    ("POST", "/admin/pause/"),
    ("POST", "//admin/pause"),
    ("POST", "/admin/%70ause"),
    ("PUT", "/sessions/" + "x" * 4000),
    ("PATCH", "/sessions/victim"),
    ("GET", "/health/../metrics"),
    ("OPTIONS", "/tasks"),
]
BODIES: dict[str, Any] = {
    "/admin/pause": {"drain_timeout_s": 1, "lease_s": 600},
    "/admin/policy-version": {"version": 99},
    "/sessions/victim": {"context": "exact"},
    "/tasks": {"task_id": "victim", "instruction": "rm -rf /", "harness": "command"},
}


def _variants(token: str, other: str) -> Iterator[dict[str, str]]:
    """Authorization headers that must not pass: none, another's, near misses, wrong forms."""
    yield {}
    yield {"Authorization": f"Bearer {other}"}
    yield {"Authorization": f"Bearer {token[:-1]}"}
    yield {"Authorization": f"Bearer {token}x"}
    yield {"Authorization": f"Basic {token}"}
    yield {"Authorization": token}
    yield {"Authorization": "Bearer "}
    yield {"X-Api-Key": token}
    yield {"Authorization": f"Bearer {token.upper()}"}


async def _tasks_produced(kafka: KafkaSettings) -> int:
    return await records_produced(kafka, TopicNames(kafka.topic_prefix).tasks)


async def test_no_call_without_its_token_has_an_effect_or_leaks_it(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    chaos_report: ChaosReport,
) -> None:
    admin_token, api_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    state = tmp_path / "state"
    statuses: Counter[int] = Counter()
    tried = 0
    with caplog.at_level(logging.DEBUG):
        async with scripted_interceptor(
            kafka_settings, state, admin_token=admin_token, strict=True
        ) as proxy:
            settings = NodeSettings(
                port=0,
                base_url=proxy.url,
                interceptor_admin=proxy.admin_url,
                model=MODEL,
                api_token=SecretStr(api_token),
                interceptor_token=SecretStr(admin_token),
            )
            paths = StatePaths(state_dir=state, cache_dir=JAR_CACHE)
            async with (
                Node(settings, kafka_settings, PublisherSettings(), paths) as node,
                aiohttp.ClientSession() as http,
            ):
                before = await _tasks_produced(kafka_settings)
                planes = [
                    (proxy.admin_url, ADMIN_ROUTES + ODD_PATHS, admin_token, api_token),
                    (node.url, NODE_ROUTES + ODD_PATHS, api_token, admin_token),
                ]
                for base, routes, token, other in planes:
                    for method, path in routes:
                        for headers in _variants(token, other):
                            body = BODIES.get(path)
                            async with http.request(
                                method, f"{base}{path}", json=body, headers=headers
                            ) as reply:
                                await reply.read()
                                statuses[reply.status] += 1
                                tried += 1
                # No effect: nothing registered, paused, versioned or submitted.
                assert "victim" not in proxy.addon.sessions
                assert not proxy.addon.gate.paused
                assert proxy.addon.policy_version == 0
                assert await _tasks_produced(kafka_settings) == before
                assert node.scheduler.summaries("victim") == []
    assert statuses == Counter({401: tried}), statuses
    log = caplog.text
    leaked = sum(log.count(t) for t in (admin_token, api_token))
    assert leaked == 0
    assert log.count("refused ") >= tried
    chaos_report(
        fault="control planes called without their token (interceptor admin port, node API)",
        load=f"{tried} requests: every route, odd paths, 9 token variants each",
        lost=0,
        duplicated=0,
        errors=f"{statuses[401]} x 401 (expected); effects 0; tokens in logs {leaked}",
    )
