"""The node's API behind its token, and its registrations behind the interceptor's.

A real node and a real interceptor in strict mode, each with its own token: a caller without
the node's token has no effect (nothing reaches the tasks topic), the node registers its
sessions with the interceptor's token so that their calls are accepted, and neither token
reaches a harness. A node holding a wrong interceptor token says which setting to fix.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import AvroRecord, SessionEnded, TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE
from tests.harness_stack import MODEL, scripted_interceptor
from tests.kafka_reading import read_records, records_produced

pytestmark = pytest.mark.integration

AGENT = "tests.producers.node.agents:one_call"
REPO_ROOT = Path(__file__).resolve().parents[3]


@asynccontextmanager
async def _node(
    kafka: KafkaSettings,
    state_dir: Path,
    api: str,
    interceptor: str,
    held: str,
    env: pytest.MonkeyPatch,
) -> AsyncIterator[Node]:
    """A node with API token ``api`` and interceptor token ``held``, in front of an interceptor
    in strict mode whose admin token is ``interceptor``.

    The node's tokens are in this process's environment, as a deployed node's are: what its
    harnesses inherit is then checked against them.
    """
    env.setenv("ROLLSTREAM_NODE_API_TOKEN", api)
    env.setenv("ROLLSTREAM_NODE_INTERCEPTOR_TOKEN", held)
    paths = StatePaths(state_dir=state_dir, cache_dir=JAR_CACHE)
    async with scripted_interceptor(
        kafka, state_dir, admin_token=interceptor, strict=True
    ) as proxy:
        settings = NodeSettings(
            port=0,
            base_url=proxy.url,
            interceptor_admin=proxy.admin_url,
            model=MODEL,
            node_id="token-node",
        )
        assert settings.api_token == SecretStr(api)
        async with Node(settings, kafka, PublisherSettings(), paths) as node:
            yield node


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _tasks_produced(kafka: KafkaSettings) -> int:
    return await records_produced(kafka, TopicNames(kafka.topic_prefix).tasks)


async def _follow(
    http: aiohttp.ClientSession, task_id: str, headers: dict[str, str]
) -> dict[str, Any]:
    async with asyncio.timeout(120):
        while True:
            async with http.get(f"/tasks/{task_id}", headers=headers) as reply:
                if reply.status == 200:
                    state: dict[str, Any] = await reply.json()
                    if state["done"]:
                        return state
            await asyncio.sleep(0.2)


def _task(task_id: str, harness: str = "python", **metadata: str) -> dict[str, Any]:
    python = {"harness.function": AGENT, "harness.pythonpath": str(REPO_ROOT)}
    meta = python if harness == "python" else {}
    return {
        "task_id": task_id,
        "instruction": "hi",
        "samples": 1,
        "harness": harness,
        "agent_timeout_s": 60,
        "metadata": meta | metadata,
    }


async def test_only_the_token_submits_and_registered_sessions_are_accepted(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, admin = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    async with (
        _node(kafka_settings, tmp_path / "state", api, admin, admin, monkeypatch) as node,
        aiohttp.ClientSession(base_url=node.url) as http,
    ):
        before = await _tasks_produced(kafka_settings)
        for headers in ({}, _bearer("x" + api), _bearer(admin), {"Authorization": api}):
            async with http.post("/tasks", json=_task("t-refused"), headers=headers) as reply:
                assert reply.status == 401
                assert reply.headers["WWW-Authenticate"].startswith("Bearer")
                assert (await reply.json())["error"]["type"] == "unauthorized"
            for method, path in (("GET", "/tasks/t-refused"), ("DELETE", "/tasks/t-refused")):
                async with http.request(method, path, headers=headers) as reply:
                    assert reply.status == 401
            async with http.get("/metrics", headers=headers) as reply:
                assert reply.status == 401
        async with http.get("/health") as reply:
            assert reply.status == 200
        assert await _tasks_produced(kafka_settings) == before  # no effect without the token

        async with http.post("/tasks", json=_task("t-token"), headers=_bearer(api)) as reply:
            assert reply.status == 202, await reply.text()
        state = await _follow(http, "t-token", _bearer(api))
        [session] = state["sessions"]
        # Registered with the interceptor's token, the strict interceptor took its call.
        assert session["status"] == "completed", repr(session)
        assert session["call_count"] == 1
        # Neither token reaches a harness: its whole environment, printed.
        env_task = _task("t-env", harness="command", **{"harness.command": "env > env.txt"})
        async with http.post("/tasks", json=env_task, headers=_bearer(api)) as reply:
            assert reply.status == 202
        [env_session] = (await _follow(http, "t-env", _bearer(api)))["sessions"]
        assert env_session["status"] == "completed"
    [ended] = await read_records(
        kafka_settings,
        TopicNames(kafka_settings.topic_prefix).events,
        AvroRecord,
        1,
        where=lambda r: isinstance(r, SessionEnded) and r.session_id == env_session["session_id"],
    )
    assert isinstance(ended, SessionEnded)
    [diff] = [a.content for a in ended.artifacts if a.name == "workspace.diff"]
    assert b"+HOME=" in diff  # the harness's environment, whole
    assert api.encode() not in diff and admin.encode() not in diff
    assert api not in caplog.text and admin not in caplog.text


async def test_a_node_with_a_wrong_interceptor_token_names_the_setting(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, admin = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    with caplog.at_level(logging.WARNING):
        async with (
            _node(kafka_settings, tmp_path / "state", api, admin, "x" + admin, monkeypatch) as node,
            aiohttp.ClientSession(base_url=node.url) as http,
        ):
            async with http.post("/tasks", json=_task("t-wrong"), headers=_bearer(api)) as reply:
                assert reply.status == 202
            state = await _follow(http, "t-wrong", _bearer(api))
    [session] = state["sessions"]
    # Unregistered, the harness's call was refused by the strict interceptor.
    assert session["status"] != "completed", session
    assert "ROLLSTREAM_NODE_INTERCEPTOR_TOKEN" in caplog.text
    assert admin not in caplog.text
