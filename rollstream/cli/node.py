"""``rollstream node`` and ``rollstream run``: the rollout node, and submitting work to it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import click
from pydantic import SecretStr

from rollstream.cli.extras import require_extra
from rollstream.cli.options import settings_options
from rollstream.lifecycle import StopSignal, announce, run_service
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.schemas.swe import GITHUB_REPOS
from rollstream.settings import KafkaSettings, StatePaths


@click.command(name="node", short_help="Run harness sessions for the tasks on the tasks topic.")
@settings_options(NodeSettings, "settings")
@settings_options(KafkaSettings, "kafka")
@settings_options(PublisherSettings, "publisher")
def node(settings: NodeSettings, kafka: KafkaSettings, publisher: PublisherSettings) -> None:
    """Run harness sessions for the tasks topic (a consumer group); serve the task API."""
    require_extra("producers")
    from rollstream.producers.node.service import Node

    async def main(stop: StopSignal) -> None:
        async with Node(settings, kafka, publisher, StatePaths()) as service:
            click.echo(
                f"node {settings.node_id}: tasks from {kafka.topic_prefix}.tasks, API on "
                f"{service.url}, harnesses -> {settings.base_url}",
                err=True,
            )
            announce(node=service.url)
            await stop.event.wait()

    run_service(main)


def _stack_node() -> tuple[str, SecretStr] | None:
    """The node of the stack `rollstream up` started in this state directory and its token."""
    from rollstream.dev.stack.processes import StackState, state_path
    from rollstream.dev.stack.tokens import StackTokens

    state_dir = StatePaths().state_dir
    state = StackState.load(state_path(state_dir))
    url = state.url("node") if state is not None else None
    return None if url is None else (url, StackTokens.kept(state_dir).node)


@click.command(name="run", short_help="Submit tasks to a node and follow their sessions.")
@click.option(
    "--task",
    "task_file",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="One task, YAML or JSON.",
)
@click.option(
    "--tasks",
    "tasks_file",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Many: JSON Lines of task documents and SWE-bench-format instances, or a directory "
    "of Harbor tasks (or one).",
)
@click.option(
    "--harness", default=None, help="Override the tasks' harness (required for SWE instances)."
)
@click.option("--samples", type=int, default=None, help="Override the tasks' samples.")
@click.option(
    "--repos",
    default=GITHUB_REPOS,
    show_default=True,
    envvar="ROLLSTREAM_SWE_REPOS",
    help="Where SWE instances' repositories are cloned from: {repo}, {owner}, {name} are "
    "filled in (a local mirror: /mirrors/{owner}__{name}). [env: ROLLSTREAM_SWE_REPOS]",
)
@click.option("--image", default=None, help="Container image of tasks that name none.")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Follow it to the end.")
@click.option(
    "--node",
    "node_url",
    default=None,
    envvar="ROLLSTREAM_NODE_URL",
    help="A node's API. Default: the node of `rollstream up`, else http://127.0.0.1:8200. Its "
    "token: ROLLSTREAM_NODE_API_TOKEN, else the stack's. [env: ROLLSTREAM_NODE_URL]",
)
@click.option("--timeout", type=float, default=3600, show_default=True, help="Seconds to wait.")
def run(
    task_file: Path | None,
    tasks_file: Path | None,
    harness: str | None,
    samples: int | None,
    repos: str,
    image: str | None,
    wait: bool,
    node_url: str | None,
    timeout: float,
) -> None:
    """Submit tasks to a node and follow their sessions to the end."""
    from rollstream.cli.tasks_file import Overrides, TasksFileError, task_document, task_documents

    if (task_file is None) == (tasks_file is None):
        raise click.UsageError("give one of --task FILE and --tasks FILE")
    # The API token: ROLLSTREAM_NODE_API_TOKEN (the node's own setting), else the stack's.
    token = NodeSettings().api_token
    stack = _stack_node() if node_url is None or token is None else None
    if node_url is None:
        node_url = stack[0] if stack is not None else "http://127.0.0.1:8200"
    if token is None and stack is not None and stack[0] == node_url:
        token = stack[1]
    overrides = Overrides(harness, samples, repos, image)
    try:
        if tasks_file is not None:
            docs = task_documents(tasks_file, overrides)
        else:
            assert task_file is not None
            docs = [task_document(task_file, overrides)]
    except TasksFileError as exc:
        raise click.ClickException(str(exc)) from None
    followed = asyncio.run(_submit_and_follow(docs, node_url, token, wait, timeout))
    if not wait:
        return
    unfinished = 0
    for submitted, state in followed:
        by_status: dict[str, int] = {}
        for session in state["sessions"]:
            by_status[str(session["status"])] = by_status.get(str(session["status"]), 0) + 1
        calls = sum(s["call_count"] or 0 for s in state["sessions"])
        summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "none yet"
        click.echo(f"{submitted['task_id']}: sessions {summary}; {calls} calls recorded")
        unfinished += not state["done"]
    if unfinished:
        raise SystemExit(1)


async def _submit_and_follow(
    docs: list[dict[str, Any]],
    node_url: str,
    token: SecretStr | None,
    wait: bool,
    timeout: float,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Submit every task, then poll them all until each is done (or ``timeout``)."""
    import aiohttp
    import yaml

    from rollstream.http_auth import auth_headers

    followed: list[tuple[dict[str, Any], dict[str, Any]]] = []
    async with aiohttp.ClientSession(
        base_url=node_url, timeout=aiohttp.ClientTimeout(total=30), headers=auth_headers(token)
    ) as client:
        for doc in docs:
            async with client.post("/tasks", data=yaml.safe_dump(doc)) as response:
                if response.status != 202:
                    raise click.ClickException(
                        f"the node refused task {doc.get('task_id', '')}: {await response.text()}"
                    )
                submitted: dict[str, Any] = await response.json()
            task_id, samples = submitted["task_id"], submitted["samples"]
            click.echo(f"submitted {task_id} ({samples} samples)", err=True)
            followed.append((submitted, {"sessions": [], "done": False}))
        deadline = time.monotonic() + timeout
        while wait and time.monotonic() < deadline:
            for index, (submitted, state) in enumerate(followed):
                if state["done"]:
                    continue
                async with client.get(f"/tasks/{submitted['task_id']}") as reply:
                    if reply.status == 200:
                        followed[index] = (submitted, await reply.json())
            samples = sum(s["samples"] for s, _ in followed)
            ended = sum([x["stage"] for x in st["sessions"]].count("ended") for _, st in followed)
            done = sum(1 for _, st in followed if st["done"])
            click.echo(
                f"\r{done}/{len(followed)} tasks done, {ended}/{samples} sessions ended   ",
                nl=False,
                err=True,
            )
            if done == len(followed) and ended >= samples:
                break
            await asyncio.sleep(0.5)
        if wait:
            click.echo("", err=True)
    return followed
