"""Task: work for the rollout nodes."""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field, model_validator

from rollstream.schemas.base import AvroRecord, Model

#: Set by the docker runtime in every container it makes, and nowhere else: a task's command
#: that may only ever run inside one (it changes what is outside its workspace) checks it.
CONTAINER_MARK = "ROLLSTREAM_SANDBOX_CONTAINER"


class WorkspaceKind(StrEnum):
    """Where a session's workspace comes from."""

    EMPTY = "empty"
    INLINE = "inline"
    DIRECTORY = "directory"
    GIT = "git"


class Workspace(Model):
    """The files a session starts with: inline, a local directory, or a git repository."""

    kind: WorkspaceKind = WorkspaceKind.EMPTY
    files: dict[str, str] = Field(default_factory=dict)
    path: str | None = None
    commit: str | None = None

    @model_validator(mode="after")
    def _fields_match_kind(self) -> Workspace:
        if self.kind in (WorkspaceKind.DIRECTORY, WorkspaceKind.GIT) and not self.path:
            raise ValueError(f"a {self.kind.value} workspace needs a path")
        if self.kind is WorkspaceKind.GIT and not self.commit:
            raise ValueError("a git workspace needs a commit")
        if self.files and self.kind is not WorkspaceKind.INLINE:
            raise ValueError("files are only for an inline workspace")
        return self


class EvaluatorSpec(Model):
    """Which evaluator scores the task's sessions, and its configuration."""

    kind: str
    config: dict[str, str] = Field(default_factory=dict)


class Task(AvroRecord):
    """Run ``harness`` ``samples`` times on ``instruction``; the samples form one group."""

    avro_name = "rollstream.Task"

    task_id: str = Field(min_length=1)
    group_id: str = Field(min_length=1)
    instruction: str
    samples: int = Field(default=1, ge=1)
    harness: str
    workspace: Workspace = Field(default_factory=Workspace)
    setup: list[str] = Field(default_factory=list)
    evaluator: EvaluatorSpec | None = None
    init_timeout_s: float = Field(default=300.0, gt=0)
    agent_timeout_s: float = Field(default=1800.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    #: The container image the sessions run in (and the scorer's checks) with the docker runtime;
    #: None: the runtime's configured image. The local runtime runs on the host regardless.
    image: str | None = None
    priority: int = 0
    metadata: dict[str, str] = Field(default_factory=dict)
    submitted_at: AwareDatetime
