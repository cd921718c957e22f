"""The node as a service: tasks through its API and Kafka, real harnesses, records in Kafka."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner, Result

from rollstream.cli import cli
from rollstream.consumers.score.evaluators import evaluate
from rollstream.kafka.control import publish_policy_version
from rollstream.producers.node.service import Node
from rollstream.producers.node.session import CONTEXT_METADATA
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.schemas import (
    AvroRecord,
    CallRecord,
    ContextMode,
    SessionEnded,
    SessionStarted,
    TopicNames,
)
from rollstream.schemas.sessions import SessionStatus
from rollstream.settings import KafkaSettings, StatePaths
from tests import swe_project
from tests.conftest import JAR_CACHE
from tests.harness_stack import MODEL, harnesses_installed, scripted_interceptor
from tests.kafka_reading import read_records
from tests.schemas.samples import TRAJECTORY

pytestmark = pytest.mark.integration


@pytest.fixture
async def stack(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> AsyncIterator[Node]:
    paths = StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE)
    async with scripted_interceptor(kafka_settings, paths.state_dir) as interceptor:
        settings = NodeSettings(
            port=0,
            base_url=interceptor.url,
            interceptor_admin=interceptor.admin_url,
            model=MODEL,
            max_init=2,
            max_run=4,
            node_id="test-node",
        )
        node = Node(settings, kafka_settings, PublisherSettings(), paths)
        await node.start()
        try:
            yield node
        finally:
            await node.stop()


async def _run_task(node: Node, task: dict[str, Any], timeout: float = 240) -> dict[str, Any]:
    async with aiohttp.ClientSession(base_url=node.url) as http:
        async with http.post("/tasks", json=task) as response:
            assert response.status == 202, await response.text()
            task_id = (await response.json())["task_id"]
        async with asyncio.timeout(timeout):
            while True:
                async with http.get(f"/tasks/{task_id}") as reply:
                    if reply.status == 200:
                        state: dict[str, Any] = await reply.json()
                        if state["done"] and len(state["sessions"]) == task["samples"]:
                            return state
                await asyncio.sleep(0.3)


async def _events(settings: KafkaSettings, until: int, task_id: str) -> list[AvroRecord]:
    def of_task(record: AvroRecord) -> bool:
        return str(getattr(record, "session_id", "")).startswith(task_id)

    return await read_records(
        settings,
        TopicNames(settings.topic_prefix).events,
        AvroRecord,
        until,
        where=of_task,
        settle_s=1.0,
    )


@pytest.mark.parametrize("harness", list(PACKAGES))
async def test_a_task_with_samples_ends_with_their_sessions_and_every_call_counted(
    harness: str, stack: Node, kafka_settings: KafkaSettings
) -> None:
    harnesses_installed()
    task_id = f"t-{harness}"
    task = {
        "task_id": task_id,
        "group_id": f"g-{harness}",
        "instruction": "Create hello.txt containing polar.",
        "samples": 2,
        "harness": harness,
        "workspace": {"kind": "inline", "files": {"README.md": "a task\n"}},
        "agent_timeout_s": 180,
    }
    # A trainer's version reaches the node and the interceptor through the control topic.
    await publish_policy_version(kafka_settings, 2, publisher="trainer-a")
    for _ in range(300):
        if stack.runner.policy_version == 2:
            break
        await asyncio.sleep(0.1)
    state = await _run_task(stack, task)
    assert [s["status"] for s in state["sessions"]] == ["completed", "completed"], state

    # Each session: started, its calls, ended; the count it reports is the calls in Kafka.
    expected = sum(2 + s["call_count"] for s in state["sessions"])
    records = await _events(kafka_settings, expected, task_id)
    assert len(records) == expected
    for view in state["sessions"]:
        mine = [r for r in records if getattr(r, "session_id", None) == view["session_id"]]
        calls = [r for r in mine if isinstance(r, CallRecord)]
        [started] = [r for r in mine if isinstance(r, SessionStarted)]
        [ended] = [r for r in mine if isinstance(r, SessionEnded)]
        assert ended.call_count == len(calls) >= 3
        assert all(c.completion_token_ids for c in calls)
        assert started.node_id == "test-node" and started.group_id == f"g-{harness}"
        assert ended.status is SessionStatus.COMPLETED and ended.exit_code == 0
        assert started.policy_version == ended.policy_version == 2
        assert {c.policy_version for c in calls} == {2}
        assert started.task is not None and started.task.task_id == task_id
        [diff] = [a for a in ended.artifacts if a.name == "workspace.diff"]
        assert b"+++ b/hello.txt" in diff.content and b"+polar" in diff.content


async def test_a_task_chooses_exact_context_for_its_sessions(
    stack: Node, kafka_settings: KafkaSettings
) -> None:
    harnesses_installed()
    task = {
        "task_id": "t-exact",
        "samples": 1,
        "group_id": "g-exact",
        "instruction": "Create hello.txt containing polar.",
        "harness": "pi",
        "workspace": {"kind": "inline", "files": {"README.md": "a task\n"}},
        "agent_timeout_s": 180,
        "metadata": {CONTEXT_METADATA: "exact"},  # the interceptor's default is ordinary
    }
    state = await _run_task(stack, task)
    [view] = state["sessions"]
    assert view["status"] == "completed", state
    records = await _events(kafka_settings, 2 + view["call_count"], "t-exact")
    calls = sorted((r for r in records if isinstance(r, CallRecord)), key=lambda r: r.seq)
    modes = [c.context.mode if c.context else None for c in calls]
    # The first call starts the thread; every later one continues it from tokens.
    assert modes == [ContextMode.ORDINARY] + [ContextMode.EXACT] * (len(calls) - 1), modes


async def test_bad_tasks_are_refused_and_a_cancelled_task_ends_cancelled(
    stack: Node, kafka_settings: KafkaSettings
) -> None:
    async with aiohttp.ClientSession(base_url=stack.url) as http:
        async with http.post("/tasks", data="samples: [not, a, number]") as response:
            assert response.status == 400 and "invalid task" in await response.text()
        refused = [
            {"instruction": "x", "harness": "cursor"},  # no such harness
            {"instruction": "x", "harness": "command"},  # its command option is missing
            {
                "instruction": "x",
                "harness": "pi",
                "workspace": {"kind": "inline", "files": {"../x": "y"}},
            },
            {"instruction": "x", "harness": "pi", "metadata": {CONTEXT_METADATA: "sometimes"}},
        ]
        for doc in refused:
            async with http.post("/tasks", json=doc) as response:
                assert response.status == 400, doc
        async with http.get("/tasks/nope") as response:
            assert response.status == 404
        task = {
            "task_id": "t-cancel",
            "instruction": "wait",
            "samples": 2,
            "harness": "command",
            "metadata": {"harness.command": "sleep 300"},
        }
        async with http.post("/tasks", json=task) as response:
            assert response.status == 202
        async with asyncio.timeout(60):
            while True:  # both running
                async with http.get("/tasks/t-cancel") as reply:
                    if reply.status == 200:
                        stages = [s["stage"] for s in (await reply.json())["sessions"]]
                        if stages == ["run", "run"]:
                            break
                await asyncio.sleep(0.2)
        async with http.delete("/tasks/t-cancel") as response:
            assert (await response.json())["cancelled"] == 2
        async with asyncio.timeout(30):
            while True:
                async with http.get("/tasks/t-cancel") as reply:
                    state = await reply.json()
                    if state["done"]:
                        break
                await asyncio.sleep(0.2)
        assert [s["status"] for s in state["sessions"]] == ["cancelled", "cancelled"]
        async with http.get("/metrics") as response:
            assert "rollstream_node_tasks_total 1" in await response.text()
    ended = [r for r in await _events(kafka_settings, 4, "t-cancel") if isinstance(r, SessionEnded)]
    assert [e.status for e in ended] == [SessionStatus.CANCELLED] * 2


async def test_rollstream_run_submits_follows_and_summarises(stack: Node, tmp_path: Path) -> None:
    task_file = tmp_path / "task.yaml"
    task_file.write_text(
        "task_id: t-run\ninstruction: hello\nsamples: 3\nharness: command\n"
        "metadata:\n  harness.command: echo {instruction} > out.txt\n"
    )
    runner = CliRunner()

    def run(*args: str) -> Result:  # the command runs its own event loop
        return runner.invoke(cli, ["run", "--task", str(task_file), "--node", stack.url, *args])

    result = await asyncio.to_thread(run, "--samples", "2")
    assert result.exit_code == 0, result.output
    assert "submitted t-run (2 samples)" in result.output
    assert "t-run: sessions 2 completed; 0 calls recorded" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("- not a mapping\n")
    refused = await asyncio.to_thread(
        runner.invoke, cli, ["run", "--task", str(bad), "--node", stack.url]
    )
    assert refused.exit_code == 1 and "must be a mapping" in refused.output


async def test_rollstream_run_takes_swe_instances_whose_sessions_diffs_are_judged(
    stack: Node, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    project = swe_project.build(tmp_path / "swe")
    fix = "sed -i \"s/'-', 1)/'-')/\" inflection/__init__.py"
    tests = f"{sys.executable} -m pytest -rA -p no:cacheprovider"
    lines = [
        project.instance
        | {"instance_id": f"swe-{name}", "test_command": tests}
        # An extension of the format: the task's metadata, here the command harness's command.
        | {"metadata": {"harness.command": command}}
        for name, command in (("fixed", fix), ("left", "true"))
    ]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["run", "--tasks", str(tasks), "--harness", "command", "--node", stack.url]
    args += ["--repos", f"{project.mirrors}/{{owner}}__{{name}}"]
    result = await asyncio.to_thread(CliRunner().invoke, cli, args)
    assert result.exit_code == 0, result.output
    assert "swe-fixed: sessions 1 completed" in result.output
    assert "swe-left: sessions 1 completed" in result.output
    rewards = {}
    for task_id in ("swe-fixed", "swe-left"):
        records = await _events(kafka_settings, 2, task_id)
        [started] = [r for r in records if isinstance(r, SessionStarted)]
        [ended] = [r for r in records if isinstance(r, SessionEnded)]
        task = started.task
        assert task is not None and task.workspace.path == str(project.repo)
        trajectory = TRAJECTORY.model_copy(update={"task": task, "artifacts": ended.artifacts})
        assert task.evaluator is not None and task.evaluator.kind == "swe"
        scored = await evaluate(trajectory, task.evaluator, timeout_s=120, work_root=tmp_path)
        assert scored.error is None, scored
        rewards[task_id] = scored.reward
    assert rewards == {"swe-fixed": 1.0, "swe-left": 0.0}
