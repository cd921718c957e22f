"""A rollout node in front of a 2-worker pool: each harness calls its session's worker directly."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rollstream.producers.node.service import Node
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas import AvroRecord, CallRecord, SessionEnded, SessionStarted, TopicNames
from rollstream.schemas.sessions import SessionStatus
from rollstream.settings import KafkaSettings, StatePaths
from tests.interceptor.pool_stack import (
    MODEL,
    client,
    interceptor_pool,
    metrics,
    scripted_upstream,
    summed,
)
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration

#: A harness making two calls where the node points it, saying where that was.
CALLER = f"""
import json, os, urllib.request
base = os.environ["ROLLSTREAM_BASE_URL"]
print("base", base)
for _ in range(2):
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps({{"model": "{MODEL}", "max_tokens": 3,
                          "messages": [{{"role": "user", "content": "hi"}}]}}).encode(),
        headers={{"authorization": "Bearer " + os.environ["ROLLSTREAM_SESSION"],
                  "content-type": "application/json"}},
    )
    print("status", urllib.request.urlopen(request).status)
"""


async def _run(node: Node, task: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession(base_url=node.url) as http:
        async with http.post("/tasks", json=task) as response:
            assert response.status == 202, await response.text()
        async with asyncio.timeout(120):
            while True:
                async with http.get(f"/tasks/{task['task_id']}") as reply:
                    if reply.status == 200:
                        state: dict[str, Any] = await reply.json()
                        if state["done"] and len(state["sessions"]) == task["samples"]:
                            return state
                await asyncio.sleep(0.2)


async def test_a_node_spreads_its_sessions_over_the_workers(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    script = tmp_path / "caller.py"
    script.write_text(CALLER)
    task = {
        "task_id": "t-pool",
        "instruction": "call twice",
        "samples": 4,
        "harness": "command",
        "metadata": {"harness.command": f"{sys.executable} {script}"},
        "agent_timeout_s": 60,
    }
    async with (
        scripted_upstream(tmp_path / "backend") as upstream,
        interceptor_pool(kafka_settings, upstream, strict_sessions=True) as pool,
    ):
        settings = NodeSettings(
            port=0,
            base_url=pool.url,
            interceptor_admin=pool.admin_url,
            work_root=tmp_path / "sessions",
            max_init=4,
            max_run=4,
            node_id="pool-node",
        )
        paths = StatePaths(state_dir=tmp_path / "node-state")
        async with Node(settings, kafka_settings, PublisherSettings(), paths) as node:
            state = await _run(node, task)
        assert [s["status"] for s in state["sessions"]] == ["completed"] * 4, state
        async with client() as http:
            values = await metrics(http, pool.admin_url)
        # Two sessions on each worker, two calls each, none through the router.
        assert values['rollstream_calls_total{worker="0"}'] == 4
        assert values['rollstream_calls_total{worker="1"}'] == 4
        assert summed(values, "rollstream_pool_connections_routed_total") == 0
        assert summed(values, "rollstream_pool_sessions_assigned") == 0  # every one forgotten
        workers = {w.url.rsplit(":", 1)[1] for w in pool.workers}

    events = await read_records(
        kafka_settings, TopicNames(kafka_settings.topic_prefix).events, AvroRecord, 16, settle_s=1
    )
    ended = [r for r in events if isinstance(r, SessionEnded)]
    assert len(ended) == 4 and {e.status for e in ended} == {SessionStatus.COMPLETED}
    assert sum(isinstance(r, SessionStarted) for r in events) == 4
    ports = set()
    for end in ended:
        calls = [r for r in events if isinstance(r, CallRecord) and r.session_id == end.session_id]
        assert end.call_count == len(calls) == 2  # counted by the session's worker
        [stdout] = [a for a in end.artifacts if a.name == "stdout"]
        lines = stdout.content.decode().split()
        assert lines.count("200") == 2
        ports.add(lines[1].rsplit(":", 1)[1])
    assert ports == workers  # each harness was pointed straight at a worker, both used
