"""Shared pieces of the rollout node tests: tasks, a record sink, process checks."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollstream.producers.node.session import SessionRecord, SessionRunner
from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox.runtimes import make_runtime
from rollstream.schemas.base import utcnow
from rollstream.schemas.sessions import SessionEnded, SessionStarted
from rollstream.schemas.tasks import Task

REPO_ROOT = Path(__file__).resolve().parents[3]


def command_task(command: str, **fields: Any) -> Task:
    """A task for the ``command`` harness running ``command``."""
    metadata = {"harness.command": command, **fields.pop("metadata", {})}
    values: dict[str, Any] = {
        "task_id": "t1",
        "group_id": "g1",
        "instruction": "Do it.",
        "harness": "command",
        "agent_timeout_s": 30.0,
        "init_timeout_s": 30.0,
        "submitted_at": utcnow(),
        "metadata": metadata,
    }
    return Task(**(values | fields))


@dataclass
class Sink:
    """Collects emitted records; answers call counts from a table (default 3)."""

    records: list[SessionRecord] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    async def emit(self, record: SessionRecord) -> None:
        self.records.append(record)

    async def calls_of(self, session_id: str) -> int:
        self.asked.append(session_id)
        return self.counts.get(session_id, 3)

    def of(self, session_id: str) -> list[SessionRecord]:
        return [r for r in self.records if r.session_id == session_id]

    def ended(self) -> list[SessionEnded]:
        return [r for r in self.records if isinstance(r, SessionEnded)]

    def started(self) -> list[SessionStarted]:
        return [r for r in self.records if isinstance(r, SessionStarted)]


def make_runner(tmp_path: Path, sink: Sink, **settings: Any) -> SessionRunner:
    """A runner with a local runtime under ``tmp_path/sessions``."""
    node = NodeSettings(work_root=tmp_path / "sessions", **settings)
    return SessionRunner(node, make_runtime(node), sink.emit, sink.calls_of)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def wait_dead(pid: int, within_s: float = 5.0) -> bool:
    """Whether ``pid`` is dead within ``within_s``."""
    deadline = time.monotonic() + within_s
    while alive(pid) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return not alive(pid)


async def wait_for_files(paths: list[Path], within_s: float = 10.0) -> None:
    """Wait until every one of ``paths`` exists (a process wrote its pid)."""
    deadline = time.monotonic() + within_s
    while not all(p.exists() and p.read_text().strip() for p in paths):
        assert time.monotonic() < deadline, f"not written in time: {paths}"
        await asyncio.sleep(0.05)
