"""The demo: the local stack, a small task set on a real harness, the example trainer, a summary.

Three coding tasks of several samples each run on Pi (or Qwen Code; the ``python`` harness's
small agent when npm is missing) against the reference backend's scripted policy, whose
scenarios make some samples solve their task and others not. Their calls are captured,
reconstructed and scored; the example trainer takes one GRPO step per group on the tiny
model that scores the script's tokens, syncing the weights and publishing the next policy
version each time; one more session then shows new calls stamped with the trained version.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
from pydantic import SecretStr

from rollstream.consumers.trainer import TrainerSettings
from rollstream.dev.examples.grpo_trainer import ExampleTrainer, StepReport
from rollstream.dev.examples.settings import ExampleTrainerSettings
from rollstream.dev.stack.processes import StackState
from rollstream.dev.stack.tokens import StackTokens
from rollstream.errors import ConfigurationError
from rollstream.http_auth import auth_headers
from rollstream.kafka.reading import iter_values
from rollstream.sandbox.harnesses.install import installed
from rollstream.schemas import AvroSerializer, CallRecord, Scored, TopicNames
from rollstream.settings import KafkaSettings, StatePaths

if TYPE_CHECKING:
    from rollstream.consumers.console import Console

Progress = Callable[[str], None]

#: The task set: (name, instruction, evaluator). The scripted scenarios write "polar" into
#: hello.txt (solve, parallel) or give up: some samples pass each check, some do not.
TASKS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "hello",
        "Create hello.txt containing the word polar.",
        {"kind": "command", "config": {"command": "grep -qx polar hello.txt"}},
    ),
    (
        "readme",
        "Create hello.txt containing polar and keep README.md unchanged.",
        {"kind": "command", "config": {"command": "test -f hello.txt && grep -q task README.md"}},
    ),
    (
        "report",
        "Create hello.txt with polar, then say Done.",
        {"kind": "regex", "config": {"pattern": "^Done"}},
    ),
]


def pick_harness(paths: StatePaths, wanted: str | None) -> str:
    """Pi when the npm harnesses are installed, else the python harness's small agent."""
    if wanted:
        return wanted
    return "pi" if installed(paths.cache_dir) is not None else "python"


def task_document(
    run_id: str, name: str, instruction: str, evaluator: dict[str, Any], samples: int, harness: str
) -> dict[str, Any]:
    """The task as the node's API takes it."""
    doc: dict[str, Any] = {
        "task_id": f"demo-{name}-{run_id}",
        "group_id": f"demo-{name}-{run_id}-g",
        "instruction": instruction,
        "samples": samples,
        "harness": harness,
        "workspace": {"kind": "inline", "files": {"README.md": "a demo task\n"}},
        "evaluator": evaluator,
        "agent_timeout_s": 180,
    }
    if harness == "python":
        doc["metadata"] = {"harness.function": "rollstream.dev.demo.agent:run"}
    return doc


async def run_tasks(
    node: str,
    docs: list[dict[str, Any]],
    progress: Progress,
    timeout: float,
    token: SecretStr | None = None,
) -> list[dict[str, Any]]:
    """Submit every task (with the node's API ``token``), then follow them until all ended."""
    async with aiohttp.ClientSession(base_url=node, headers=auth_headers(token)) as http:
        for doc in docs:
            async with http.post("/tasks", json=doc) as response:
                if response.status != 202:
                    raise ConfigurationError(
                        f"the node refused {doc['task_id']}: {await response.text()}"
                    )
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            states = []
            for doc in docs:
                async with http.get(f"/tasks/{doc['task_id']}") as reply:
                    states.append(await reply.json() if reply.status == 200 else {})
            ended = sum(
                1 for s in states for v in s.get("sessions", []) if v.get("stage") == "ended"
            )
            total = sum(d["samples"] for d in docs)
            line = f"sessions ended: {ended}/{total}"
            if line != last:
                progress(line)
                last = line
            if all(s.get("done") for s in states):
                return states
            if time.monotonic() > deadline:
                raise TimeoutError(f"tasks not done after {timeout:.0f}s ({line})")
            await asyncio.sleep(1.0)


@dataclass
class DemoRecords:
    """What the demo's tasks left in Kafka."""

    scored: list[Scored] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)


async def read_demo_records(kafka: KafkaSettings, run_id: str) -> DemoRecords:
    """The scored trajectories and the calls of this demo run."""
    from rollstream.kafka.clients import make_consumer

    names = TopicNames(kafka.topic_prefix)
    serializer = AvroSerializer()
    out = DemoRecords()
    for topic in (names.scored, names.events):
        consumer = make_consumer(kafka)
        await consumer.start()
        try:
            async for value in iter_values(consumer, topic):
                record = serializer.decode(value)
                if isinstance(record, Scored) and run_id in record.trajectory.task_id:
                    out.scored.append(record)
                elif isinstance(record, CallRecord) and run_id in record.session_id:
                    out.calls.append(record)
        finally:
            await consumer.stop()
    return out


async def train(
    state: StackState,
    kafka: KafkaSettings,
    run_id: str,
    steps: int,
    timeout: float,
    tokens: StackTokens | None = None,
) -> list[StepReport]:
    """The example trainer, one step per group, on this run's groups (with the stack's tokens)."""
    backend, admin = state.url("backend"), state.admin_url()
    if backend is None:
        raise ConfigurationError("the demo trains the reference backend's tiny model: no backend")
    trainer = ExampleTrainer(
        ExampleTrainerSettings(
            backend_url=backend,
            interceptor_admin=admin,
            interceptor_token=None if tokens is None else tokens.interceptor,
            backend_token=None if tokens is None else tokens.backend,
            consumer_group=f"demo-trainer-{run_id}",
            steps=steps,
        ),
        TrainerSettings(group_timeout_s=timeout, incomplete="yield"),
        kafka,
    )
    async with trainer:
        return await asyncio.wait_for(trainer.run(), timeout)


def new_run_id() -> str:
    """A short id that keeps this run's task ids apart from earlier runs' in Kafka."""
    return uuid.uuid4().hex[:6]


@dataclass
class DemoOptions:
    """The few choices of a demo run (the CLI's options)."""

    harness: str | None = None
    samples: int = 4
    timeout_s: float = 240.0
    context: Literal["ordinary", "exact"] = "ordinary"  # the interceptor's context mode
    #: Keep the stack and the console up after the run until this is set (None: go down).
    hold: asyncio.Event | None = None
    holding: bool = False  # set once the run is done and the hold begins


@dataclass
class DemoResult:
    """What the demo did: the table it prints and the report it wrote."""

    table: str
    report: str
    steps: list[StepReport]


async def demo(
    view: DemoOptions,
    paths: StatePaths,
    report_path: Path,
    progress: Progress,
) -> DemoResult:
    """Up, tasks, training, one more session, summary and report; down whatever happens."""
    from rollstream.dev.demo.summary import summary_table
    from rollstream.dev.stack.local import LocalStack
    from rollstream.dev.stack.settings import StackSettings

    run_id = new_run_id()
    # Topics of their own: earlier runs' groups are not this trainer's business.
    kafka = KafkaSettings(topic_prefix=f"rollstream-demo-{run_id}")
    harness = pick_harness(paths, view.harness)
    stack = LocalStack(
        StackSettings(
            backend_port=0, interceptor_port=0, admin_port=0, node_port=0, context=view.context
        ),
        paths,
    )
    state = await stack.up(kafka, progress)
    tokens = StackTokens.kept(paths.state_dir)
    console: Console | None = None
    try:
        kafka = KafkaSettings(
            bootstrap_servers=state.bootstrap_servers, topic_prefix=state.topic_prefix
        )
        console = await open_console(state, tokens, kafka, progress)
        node = state.url("node")
        assert node is not None
        docs = [
            task_document(run_id, name, instruction, evaluator, view.samples, harness)
            for name, instruction, evaluator in TASKS
        ]
        progress(f"running {len(docs)} tasks x {view.samples} samples on {harness}")
        await run_tasks(node, docs, progress, view.timeout_s, tokens.node)
        progress("training: one GRPO step per group")
        steps = await train(state, kafka, run_id, len(docs), view.timeout_s, tokens)
        for step in steps:
            progress(step.line())
        progress("one more session after training")
        final = task_document(run_id, "after", TASKS[0][1], TASKS[0][2], 1, harness)
        await run_tasks(node, [final], progress, view.timeout_s, tokens.node)
        found = await read_demo_records(kafka, run_id)
        trained = [s for s in found.scored if "-after-" not in s.trajectory.task_id]
        after = [c for c in found.calls if f"demo-after-{run_id}" in c.session_id]
        before = [c for c in found.calls if c not in after]
        table = summary_table(trained, before, steps, after)
        note = f"rollstream demo {run_id}: {len(TASKS)} tasks on {harness}"
        report = await write_report(
            report_path, trained, found.calls, TopicNames(kafka.topic_prefix), note
        )
        if console is not None and view.hold is not None:
            progress(f"report: {report}")
            progress(f"console: {console.url} (open until Ctrl+C)")
            view.holding = True
            await view.hold.wait()
    finally:
        if console is not None:
            await console.stop()
        for name, outcome in stack.down():
            progress(f"{name:<14} {outcome}")
    return DemoResult(table, report, steps)


async def open_console(
    state: StackState, tokens: StackTokens, kafka: KafkaSettings, progress: Progress
) -> Console | None:
    """The console of the demo's stack, with a control token of its own; None without npm.

    It listens where ``ROLLSTREAM_CONSOLE_*`` says (port 8470 by default), or on any free
    port when that one is taken.
    """
    from rollstream.consumers.console import Assets, Console, ConsoleSettings
    from rollstream.dev.backend.tokenizer import default_tokenizer_dir
    from rollstream.models.tokenizer import ChatTokenizer

    assets = Assets()
    if assets.missing():
        progress("console: not started, its front end is not built (make console; needs npm)")
        return None
    admin = state.admin_url()
    settings = ConsoleSettings()
    settings = settings.model_copy(
        update={
            "control_token": settings.control_token or SecretStr(secrets.token_urlsafe(24)),
            "interceptors": (admin,) if admin else (),
            "admin_token": tokens.interceptor,
        }
    )
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    for port in (settings.port, 0):
        console = Console(settings.model_copy(update={"port": port}), kafka, tokenizer)
        try:
            await console.start()
        except OSError as exc:
            await console.stop()
            progress(f"console: port {port} is taken ({exc.strerror}); any free one instead")
            continue
        # The control token in the URL: the demo's user may pause, replay and export.
        assert console.settings.control_token is not None
        token = console.settings.control_token.get_secret_value()
        progress(f"console: {console.base_url}#token={token} (open while the demo runs)")
        return console
    return None


async def write_report(
    path: Path, scored: list[Scored], calls: list[CallRecord], names: TopicNames, note: str
) -> str:
    """The report of the demo's trained groups (the console's views in one file): where."""
    from rollstream.consumers.console import Assets
    from rollstream.consumers.console.fleet import CallFacts
    from rollstream.consumers.console.report import ReportInput, report_data
    from rollstream.consumers.console.trajectory_view import TokenTexts
    from rollstream.dev.backend.tokenizer import default_tokenizer_dir
    from rollstream.models.tokenizer import ChatTokenizer

    found = ReportInput(names.scored)
    for record in scored:
        found.add(record)
    by_session: dict[str, list[CallFacts]] = {}
    for call in calls:
        by_session.setdefault(call.session_id, []).append(CallFacts.of(call))
    texts = TokenTexts(ChatTokenizer(default_tokenizer_dir()))
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    data = report_data(found, texts, by_session, notes=[note, *found.notes()], generated=generated)
    assets = Assets()
    if assets.missing():
        return "not written: the console's front end is not built (make console; needs npm)"
    page = assets.static_page(data, title=f"rollstream demo report ({len(scored)} trajectories)")
    await asyncio.to_thread(path.write_text, page, encoding="utf-8")
    return str(path)
