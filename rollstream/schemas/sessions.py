"""Session lifecycle records: SessionStarted and SessionEnded."""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field

from rollstream.schemas.base import AvroRecord, Model
from rollstream.schemas.tasks import Task


class SessionStatus(StrEnum):
    """How a harness session ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


#: ``SessionEnded.error`` of a session a rollout node cut short while handing its task's
#: partition to another node: the sample runs again there, so this attempt is superseded.
HANDED_BACK = "handed back: this node gave up its task's partition; the sample runs again there"
#: The note (``TrajectoryStats.notes``) the reconstructor gives such a session's trajectory;
#: readers that train on groups of samples leave it out (the sample's re-run takes its place).
SUPERSEDED = "superseded: handed back to another node, whose re-run of the sample replaces it"


def handed_back(ended: SessionEnded | None) -> bool:
    """Whether ``ended`` closes a session cut short by a hand-over (see ``HANDED_BACK``)."""
    # The outcome is the error's first note; others (a diff that failed) may follow it.
    return (
        ended is not None
        and ended.status is SessionStatus.CANCELLED
        and (ended.error or "").startswith(HANDED_BACK)
    )


class _SessionRecord(AvroRecord):
    """The fields that open both lifecycle records, in their Avro order."""

    session_id: str
    task_id: str
    group_id: str
    sample_index: int = Field(default=0, ge=0)
    harness: str
    policy_version: int = 0


class SessionStarted(_SessionRecord):
    """A harness session began."""

    avro_name = "rollstream.SessionStarted"

    node_id: str = ""
    started_at: AwareDatetime
    metadata: dict[str, str] = Field(default_factory=dict)
    task: Task | None = None


class Artifact(Model):
    """A bounded output of a session, e.g. the workspace diff."""

    name: str
    media_type: str = "text/plain"
    content: bytes
    truncated: bool = False
    original_size: int = Field(default=0, ge=0)


class SessionEnded(_SessionRecord):
    """A harness session ended; ``call_count`` is what the interceptor recorded for it."""

    avro_name = "rollstream.SessionEnded"

    status: SessionStatus
    exit_code: int | None = None
    call_count: int = Field(ge=0)
    ended_at: AwareDatetime
    error: str | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
