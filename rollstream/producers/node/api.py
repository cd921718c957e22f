"""The node's HTTP API: submit tasks, follow them, cancel them, health and metrics.

``POST /tasks`` validates a task (JSON or YAML) and produces it to the tasks topic, from which
any node of the group may take it; ``GET`` and ``DELETE`` act on the sessions this node runs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiohttp import web
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from rollstream.errors import RollstreamError
from rollstream.http_auth import bearer_middleware, warn_if_open
from rollstream.kafka.clients import LazyProducer
from rollstream.producers.node.history import SessionSummary
from rollstream.producers.node.intake import TaskIntake
from rollstream.producers.node.pool import NodeScheduler
from rollstream.producers.node.session import CONTEXT_METADATA, harness_options
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import CapturePublisher
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import preset
from rollstream.sandbox.workspace import WorkspaceError, check_workspace
from rollstream.schemas import AvroSerializer, Task, TopicNames, utcnow
from rollstream.schemas.calls import ContextMode
from rollstream.settings import KafkaSettings


class Node(Protocol):
    """What the API reads of the node (``service.Node``), which serves it."""

    settings: NodeSettings
    kafka: KafkaSettings
    names: TopicNames
    serializer: AvroSerializer
    publisher: CapturePublisher
    scheduler: NodeScheduler
    intake: TaskIntake

    @property
    def tasks_seen(self) -> int:
        """Tasks the node took from the tasks topic."""


log = logging.getLogger(__name__)

#: How long a submission waits for the broker before it is refused (503).
SUBMIT_TIMEOUT_S = 15.0


def task_from_document(doc: Any) -> Task:
    """A Task from a submitted JSON/YAML document; ids and the submission time filled in."""
    if not isinstance(doc, dict):
        raise ValueError("a task must be a mapping")
    doc = dict(doc)
    doc.setdefault("task_id", f"task-{uuid.uuid4().hex[:10]}")
    doc.setdefault("group_id", doc["task_id"])
    doc.setdefault("submitted_at", utcnow())
    task = Task.model_validate(doc)
    # Refuse here what would only fail in a node's init stage later: an unknown harness, a
    # preset option missing, a workspace path escaping the workspace.
    try:
        check_workspace(task.workspace)
        context = HarnessContext(
            "http://check", "check", "check", task.instruction, harness_options(task)
        )
        preset(task.harness).launch(context, Path("/bin/true"))
    except (RollstreamError, WorkspaceError) as exc:
        raise ValueError(str(exc)) from exc
    mode = task.metadata.get(CONTEXT_METADATA)
    if mode is not None and mode.strip().lower() not in set(ContextMode):
        raise ValueError(f"metadata {CONTEXT_METADATA} must be one of {', '.join(ContextMode)}")
    return task


def session_view(summary: SessionSummary) -> dict[str, Any]:
    """One session as the API shows it."""
    return {
        "session_id": summary.session_id,
        "sample": summary.sample,
        "stage": summary.stage,
        "status": summary.status,
        "exit_code": summary.exit_code,
        "call_count": summary.call_count,
        "error": summary.error,
    }


class NodeApi:
    """Routes of one node."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.tasks_refused = 0  # submissions the broker refused (503)
        self._producer = LazyProducer(node.kafka, SUBMIT_TIMEOUT_S)  # one for every submission

    async def _close(self, _: web.Application | None = None) -> None:
        await self._producer.close()

    def app(self) -> web.Application:
        """The aiohttp application, behind the node's bearer tokens."""
        settings = self.node.settings
        warn_if_open("the node's API", settings.api_token, "ROLLSTREAM_NODE_API_TOKEN")
        guard = bearer_middleware(settings.api_token, metrics_token=settings.metrics_token)
        app = web.Application(client_max_size=8 * 1024 * 1024, middlewares=[guard])
        app.router.add_post("/tasks", self.submit)
        app.router.add_get("/tasks/{task_id}", self.status)
        app.router.add_delete("/tasks/{task_id}", self.cancel)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.on_cleanup.append(self._close)
        return app

    async def submit(self, request: web.Request) -> web.Response:
        """Validate and produce a task; 400 with the reasons when it is not one."""
        try:
            task = task_from_document(yaml.safe_load(await request.text()))
        except (yaml.YAMLError, ValueError, ValidationError) as exc:
            return web.json_response({"error": f"invalid task: {exc}"}, status=400)
        node = self.node
        try:
            producer = await self._producer.get()
            await asyncio.wait_for(
                producer.send_and_wait(
                    node.names.tasks, node.serializer.encode(task), key=task.task_id.encode()
                ),
                SUBMIT_TIMEOUT_S,
            )
        except (OSError, RollstreamError, KafkaError, TimeoutError) as exc:
            self.tasks_refused += 1
            log.warning("task %s not submitted, the broker refused it: %r", task.task_id, exc)
            await self._close()  # a fresh producer for the next submission
            return web.json_response({"error": f"the broker refused the task: {exc!r}"}, status=503)
        body = {"task_id": task.task_id, "group_id": task.group_id, "samples": task.samples}
        return web.json_response(body, status=202)

    async def status(self, request: web.Request) -> web.Response:
        """The task's sessions on this node; 404 when this node has none."""
        task_id = request.match_info["task_id"]
        sessions = self.node.scheduler.summaries(task_id)
        if not sessions:
            return web.json_response({"error": f"no task {task_id!r} on this node"}, status=404)
        views = [session_view(s) for s in sessions]
        done = all(v["stage"] == "ended" for v in views)
        return web.json_response({"task_id": task_id, "done": done, "sessions": views})

    async def cancel(self, request: web.Request) -> web.Response:
        """Cancel the task's queued and running sessions (each still ends, as cancelled)."""
        task_id = request.match_info["task_id"]
        return web.json_response(
            {"task_id": task_id, "cancelled": self.node.scheduler.cancel(task_id)}
        )

    async def health(self, request: web.Request) -> web.Response:
        """Liveness and whether records reach the broker."""
        metrics = self.node.publisher.metrics
        return web.json_response(
            {
                "status": "ok",
                "broker_connected": metrics.connected,
                "spool_alarm": metrics.spool_alarm,
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text: sessions per stage, tasks taken and handed over, commits, records."""
        meter = self.node.scheduler.meter
        intake = self.node.intake.metrics
        lines = ["# TYPE rollstream_node_sessions gauge"]
        lines += [f'rollstream_node_sessions{{stage="{k}"}} {v}' for k, v in meter.current.items()]
        lines.append("# TYPE rollstream_node_sessions_peak gauge")
        lines += [
            f'rollstream_node_sessions_peak{{stage="{k}"}} {v}' for k, v in meter.peak.items()
        ]
        lines += [
            "# TYPE rollstream_node_tasks_total counter",
            f"rollstream_node_tasks_total {self.node.tasks_seen}",
            "# TYPE rollstream_node_samples_skipped_total counter",
            f"rollstream_node_samples_skipped_total {intake.samples_skipped}",
            "# TYPE rollstream_node_samples_withdrawn_total counter",
            f"rollstream_node_samples_withdrawn_total {intake.samples_withdrawn}",
            "# TYPE rollstream_node_sessions_handed_back_total counter",
            f"rollstream_node_sessions_handed_back_total {intake.sessions_handed_back}",
            "# TYPE rollstream_node_tasks_refused_total counter",
            f"rollstream_node_tasks_refused_total {self.tasks_refused}",
            "# TYPE rollstream_node_dead_letters_total counter",
            f"rollstream_node_dead_letters_total {self.node.intake.letters.sent}",
            "# TYPE rollstream_node_dead_letters_failed_total counter",
            f"rollstream_node_dead_letters_failed_total {self.node.intake.letters.failed}",
            "# TYPE rollstream_node_dead_letters_held gauge",
            f"rollstream_node_dead_letters_held {self.node.intake.letters.held}",
            "# TYPE rollstream_node_commits_failed_total counter",
            f"rollstream_node_commits_failed_total {intake.commits_failed}",
            "# TYPE rollstream_node_loop_failures_total counter",
            f"rollstream_node_loop_failures_total {intake.loop_failures}",
            "# TYPE rollstream_node_commits_deferred_total counter",
            f"rollstream_node_commits_deferred_total {intake.commits_deferred}",
            "# TYPE rollstream_node_progress_left_out_total counter",
            f"rollstream_node_progress_left_out_total {intake.progress_left_out}",
            "# TYPE rollstream_node_partitions_behind gauge",
            f"rollstream_node_partitions_behind {self.node.intake.partitions_behind}",
            "# TYPE rollstream_node_intake_paused gauge",
            f"rollstream_node_intake_paused {int(intake.paused)}",
            "# TYPE rollstream_node_samples_queued gauge",
            f"rollstream_node_samples_queued {self.node.scheduler.queued}",
            "# TYPE rollstream_node_sessions_kept gauge",
            f"rollstream_node_sessions_kept {len(self.node.scheduler.finished)}",
            "# TYPE rollstream_records_published_total counter",
            f"rollstream_records_published_total {self.node.publisher.metrics.published}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
