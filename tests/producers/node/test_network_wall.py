"""A session's harness behind the node's network wall: the interceptor, and nothing else.

A real broker, a real interceptor (strict, with an admin token) and a real node. One session's
harness makes a chat call through the interceptor (recorded: the wall lets it out there); another
probes every port of the run: the broker, the interceptor's admin port, the node's API, and the
interceptor itself. With ``isolation=none`` the same probe sees them all (the control).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import AvroRecord, SessionEnded, TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE
from tests.harness_stack import MODEL, scripted_interceptor
from tests.kafka_reading import read_records
from tests.network_probe import REPO_ROOT, probe_command

pytestmark = pytest.mark.integration


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url if "//" in url else f"//{url}")
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


async def _run(http: aiohttp.ClientSession, token: str, task: dict[str, Any]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post("/tasks", json=task, headers=headers) as reply:
        assert reply.status == 202, await reply.text()
    async with asyncio.timeout(120):
        while True:
            async with http.get(f"/tasks/{task['task_id']}", headers=headers) as reply:
                state: dict[str, Any] = await reply.json()
                if reply.status == 200 and state["done"]:
                    [session] = state["sessions"]
                    found: dict[str, Any] = session
                    return found
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("isolation", ["namespace", "none"])
async def test_a_harness_reaches_the_interceptor_and_nothing_else_of_the_run(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
    isolation: str,
) -> None:
    api, admin = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    paths = StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE)
    async with scripted_interceptor(
        kafka_settings, tmp_path / "state", admin_token=admin, strict=True
    ) as proxy:
        settings = NodeSettings(
            port=0,
            base_url=proxy.url,
            interceptor_admin=proxy.admin_url,
            model=MODEL,
            node_id="walled-node",
            api_token=api,
            interceptor_token=admin,
            isolation=isolation,
        )
        async with (
            Node(settings, kafka_settings, PublisherSettings(), paths) as node,
            aiohttp.ClientSession(base_url=node.url) as http,
        ):
            call = await _run(
                http,
                api,
                {
                    "task_id": f"call-{isolation}",
                    "instruction": "hi",
                    "harness": "python",
                    "agent_timeout_s": 60,
                    "metadata": {
                        "harness.function": "tests.producers.node.agents:one_call",
                        "harness.pythonpath": str(REPO_ROOT),
                    },
                },
            )
            targets = {
                "interceptor": _address(proxy.url),
                "broker": _address(kafka_settings.bootstrap_servers.split(",")[0]),
                "admin port": _address(proxy.admin_url),
                "node API": _address(node.url),
            }
            probe = await _run(
                http,
                api,
                {
                    "task_id": f"probe-{isolation}",
                    "instruction": "probe",
                    "harness": "command",
                    "agent_timeout_s": 60,
                    "metadata": {"harness.command": probe_command(targets)},
                },
            )
    # Through the wall the call was made and recorded under its session.
    assert call["status"] == "completed", call
    assert call["call_count"] == 1
    assert probe["status"] == "completed", probe
    [ended] = await read_records(
        kafka_settings,
        TopicNames(kafka_settings.topic_prefix).events,
        AvroRecord,
        1,
        where=lambda r: isinstance(r, SessionEnded) and r.session_id == probe["session_id"],
    )
    assert isinstance(ended, SessionEnded)
    [diff] = [a.content for a in ended.artifacts if a.name == "workspace.diff"]
    line = next(x for x in diff.decode().splitlines() if x.startswith("+{"))
    reached = json.loads(line[1:])
    if isolation == "namespace":
        assert reached == {
            "interceptor": "open",
            "broker": "ConnectionRefusedError",
            "admin port": "ConnectionRefusedError",
            "node API": "ConnectionRefusedError",
        }
    else:
        assert set(reached.values()) == {"open"}, reached
