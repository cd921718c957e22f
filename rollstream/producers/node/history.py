"""What the node remembers of ended sessions: a short summary each, for a bounded number.

A session in memory holds its task (workspace files included) and its SessionEnded (diff and
output tails): kept for ever they would grow a node without bound. Once a session ends the
scheduler forgets it and keeps a ``SessionSummary`` here, what ``GET /tasks/{id}`` shows; past
``limit`` summaries the tasks updated least recently are forgotten whole.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from rollstream.producers.node.session import Session


@dataclass(frozen=True)
class SessionSummary:
    """One session as the API shows it: where it is, and how it ended."""

    session_id: str
    sample: int
    stage: str
    status: str | None
    exit_code: int | None
    call_count: int | None
    error: str | None

    @classmethod
    def of(cls, session: Session) -> SessionSummary:
        """The summary of ``session`` now."""
        ended = session.ended
        return cls(
            session_id=session.session_id,
            sample=session.sample,
            stage=session.stage.value,
            status=ended.status.value if ended else None,
            exit_code=ended.exit_code if ended else None,
            call_count=ended.call_count if ended else None,
            error=ended.error if ended else session.error,
        )


class FinishedSessions:
    """Summaries of ended sessions by task id, at most ``limit`` of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_task: OrderedDict[str, list[SessionSummary]] = OrderedDict()
        self._count = 0
        #: Tasks forgotten to stay within the limit.
        self.forgotten_tasks = 0

    def __len__(self) -> int:
        return self._count

    def add(self, task_id: str, summary: SessionSummary) -> None:
        """Remember ``summary`` under ``task_id``; forget the oldest tasks past the limit."""
        self._by_task.setdefault(task_id, []).append(summary)
        self._by_task.move_to_end(task_id)
        self._count += 1
        while self._count > self.limit and self._by_task:
            _, dropped = self._by_task.popitem(last=False)
            self._count -= len(dropped)
            self.forgotten_tasks += 1

    def of(self, task_id: str) -> list[SessionSummary]:
        """The summaries kept for ``task_id``, in the order the sessions ended."""
        return list(self._by_task.get(task_id, []))
