"""``rollstream node`` and ``rollstream run``: the rollout node, and submitting work to it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import click

from rollstream.capture.node.settings import NodeSettings
from rollstream.capture.publisher.client import PublisherSettings
from rollstream.cli.extras import require_extra
from rollstream.cli.options import settings_options
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings, StatePaths


@click.command(name="node", short_help="Run harness sessions for the tasks on the tasks topic.")
@settings_options(NodeSettings, "settings")
@settings_options(KafkaSettings, "kafka")
@settings_options(PublisherSettings, "publisher")
def node(settings: NodeSettings, kafka: KafkaSettings, publisher: PublisherSettings) -> None:
    """Run harness sessions for the tasks topic (a consumer group); serve the task API."""
    require_extra("capture")
    from rollstream.capture.node.service import Node

    async def main(stop: StopSignal) -> None:
        async with Node(settings, kafka, publisher, StatePaths()) as service:
            click.echo(
                f"node {settings.node_id}: tasks from {kafka.topic_prefix}.tasks, API on "
                f"{service.url}, harnesses -> {settings.base_url}",
                err=True,
            )
            await stop.event.wait()

    run_service(main)


def _stack_node() -> str | None:
    """The node of the stack `rollstream stack up` started in this state directory, if one runs."""
    from rollstream.dev.stack.processes import StackState, state_path
    from rollstream.settings import StatePaths

    state = StackState.load(state_path(StatePaths().state_dir))
    return state.url("node") if state is not None else None


@click.command(name="run", short_help="Submit a task to a node and follow its sessions.")
@click.option(
    "--task",
    "task_file",
    type=click.Path(exists=True, path_type=Path),
    required=True,
    help="The task, YAML or JSON.",
)
@click.option("--harness", default=None, help="Override the task's harness.")
@click.option("--samples", type=int, default=None, help="Override the task's samples.")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Follow it to the end.")
@click.option(
    "--node",
    "node_url",
    default=None,
    envvar="ROLLSTREAM_NODE_URL",
    help="A node's API. Default: the node of `rollstream stack up`, else http://127.0.0.1:8200. "
    "[env: ROLLSTREAM_NODE_URL]",
)
@click.option("--timeout", type=float, default=3600, show_default=True, help="Seconds to wait.")
def run(
    task_file: Path,
    harness: str | None,
    samples: int | None,
    wait: bool,
    node_url: str | None,
    timeout: float,
) -> None:
    """Submit a task to a node and follow its sessions to the end."""
    # Imported here so that `rollstream --help` works without the 'capture' extra.
    import yaml

    node_url = node_url or _stack_node() or "http://127.0.0.1:8200"
    doc: Any = yaml.safe_load(task_file.read_text())
    if not isinstance(doc, dict):
        raise click.ClickException(f"{task_file}: a task must be a mapping")
    if harness:
        doc["harness"] = harness
    if samples:
        doc["samples"] = samples
    submitted, state = asyncio.run(_submit_and_follow(doc, node_url, wait, timeout))
    if not wait:
        return
    task_id = submitted["task_id"]
    by_status: dict[str, int] = {}
    for session in state["sessions"]:
        by_status[str(session["status"])] = by_status.get(str(session["status"]), 0) + 1
    calls = sum(s["call_count"] or 0 for s in state["sessions"])
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "none yet"
    click.echo(f"{task_id}: sessions {summary}; {calls} calls recorded")
    if not state["done"]:
        raise SystemExit(1)


async def _submit_and_follow(
    doc: dict[str, Any], node_url: str, wait: bool, timeout: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    import aiohttp
    import yaml

    state: dict[str, Any] = {"sessions": [], "done": False}
    async with aiohttp.ClientSession(
        base_url=node_url, timeout=aiohttp.ClientTimeout(total=30)
    ) as client:
        async with client.post("/tasks", data=yaml.safe_dump(doc)) as response:
            if response.status != 202:
                raise click.ClickException(f"the node refused the task: {await response.text()}")
            submitted: dict[str, Any] = await response.json()
        task_id, samples = submitted["task_id"], submitted["samples"]
        click.echo(f"submitted {task_id} ({samples} samples)", err=True)
        deadline = time.monotonic() + timeout
        while wait and time.monotonic() < deadline:
            async with client.get(f"/tasks/{task_id}") as reply:
                if reply.status == 200:
                    state = await reply.json()
                    stages = [s["stage"] for s in state["sessions"]]
                    ended = stages.count("ended")
                    click.echo(
                        f"\r{task_id}: {ended}/{samples} sessions ended "
                        f"({', '.join(sorted(set(stages)))})   ",
                        nl=False,
                        err=True,
                    )
                    if state["done"] and ended >= samples:
                        break
            await asyncio.sleep(0.5)
        if wait:
            click.echo("", err=True)
    return submitted, state
