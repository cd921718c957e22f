"""Trajectory and Scored: what reconstruction and scoring emit."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Self

from pydantic import AwareDatetime, Field, model_validator

from rollstream.schemas.base import AvroRecord, Model
from rollstream.schemas.blobs import decompress_json
from rollstream.schemas.packed import Logprobs, LossMask, TokenIds
from rollstream.schemas.segment_deltas import from_wire, to_wire
from rollstream.schemas.sessions import Artifact, SessionStatus
from rollstream.schemas.tasks import Task


class TrajectoryStatus(StrEnum):
    """Whether every call the session reported arrived before reconstruction."""

    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    UNKNOWN = "unknown"
    ABANDONED = "abandoned"  # no SessionEnded before the idle timeout


class Segment(Model):
    """One token sequence of a trajectory, aligned arrays of equal length."""

    input_ids: TokenIds
    loss_mask: LossMask
    logprobs: Logprobs
    call_ids: list[str]
    parent: int | None = None

    @model_validator(mode="after")
    def _aligned(self) -> Segment:
        n = len(self.input_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"segment arrays differ in length: {n} ids, {len(self.loss_mask)} mask, "
                f"{len(self.logprobs)} logprobs"
            )
        return self

    @property
    def trainable_tokens(self) -> int:
        """How many tokens carry loss (mask 1)."""
        return sum(self.loss_mask.data)


class Compaction(Model):
    """A compaction boundary: the call that wrote the summary, the call that went on from it."""

    summary_call_id: str
    resumed_call_id: str


class TrajectoryStats(Model):
    """What the strategy did with the session's calls."""

    calls: int = Field(ge=0)
    calls_reported: int = 0
    calls_used: int = 0
    merges: int = 0
    breaks: int = 0
    break_reasons: dict[str, int] = Field(default_factory=dict)
    failed_calls: int = 0
    duplicate_calls: int = 0
    #: Answered calls the harness asked again after them (a retry): left out of training.
    superseded_calls: int = 0
    calls_without_tokens: int = 0
    missing_token_reasons: dict[str, int] = Field(default_factory=dict)
    invariant_relaxed: bool = False
    notes: list[str] = Field(default_factory=list)
    #: The compaction boundaries: each a thread going on from a summary the policy wrote.
    compactions: list[Compaction] = Field(default_factory=list)


class Thread(Model):
    """One conversation thread of a session whose harness named its sub-agents.

    ``agent`` is the sub-agent's id (None: the main thread), ``parent`` the agent id of the
    thread that spawned it (None: the main one), ``spawned_by`` the parent's call that did.
    """

    agent: str | None = None
    parent: str | None = None
    spawned_by: str | None = None
    call_ids: list[str] = Field(default_factory=list)


class Trajectory(AvroRecord):
    """A session's calls rebuilt into token segments by one strategy."""

    avro_name = "rollstream.Trajectory"

    trajectory_id: str
    session_id: str
    task_id: str
    group_id: str
    sample_index: int = 0
    harness: str = ""
    strategy: str
    status: TrajectoryStatus
    session_status: SessionStatus
    segments: list[Segment]
    stats: TrajectoryStats
    policy_versions: list[int] = Field(default_factory=list)
    created_at: AwareDatetime
    task: Task | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    messages: bytes | None = None
    final_text: str = ""
    #: The session's threads and which call spawned each; empty when no sub-agent was named.
    threads: list[Thread] = Field(default_factory=list)

    def to_avro(self) -> dict[str, Any]:
        """The record as fastavro writes it: segments as deltas of earlier ones where they pay."""
        return _trajectory_to_avro(self.model_dump(mode="python"))

    @classmethod
    def from_avro(cls, datum: dict[str, Any]) -> Self:
        """The trajectory of a record, its segments whole again."""
        return cls.model_validate(_trajectory_from_avro(datum))

    def artifact(self, name: str) -> Artifact | None:
        """The session's artifact called ``name`` (e.g. ``diff``), if it has one."""
        return next((a for a in self.artifacts if a.name == name), None)

    def decoded_messages(self) -> list[dict[str, Any]]:
        """The last answered call's Chat messages and its answer, or [] when none was kept."""
        if self.messages is None:
            return []
        decoded = decompress_json(self.messages)
        return decoded if isinstance(decoded, list) else []

    @property
    def trainable_tokens(self) -> int:
        """Tokens with loss mask 1 over every segment."""
        return sum(s.trainable_tokens for s in self.segments)


class Scored(AvroRecord):
    """A trajectory with its reward; ``reward`` is None when the evaluator failed."""

    avro_name = "rollstream.Scored"

    trajectory: Trajectory
    reward: float | None = None
    evaluator: str
    details: dict[str, str] = Field(default_factory=dict)
    error: str | None = None
    scored_at: AwareDatetime

    def to_avro(self) -> dict[str, Any]:
        """The record as fastavro writes it (its trajectory's segments as deltas)."""
        datum = self.model_dump(mode="python")
        datum["trajectory"] = _trajectory_to_avro(datum["trajectory"])
        return datum

    @classmethod
    def from_avro(cls, datum: dict[str, Any]) -> Self:
        """The Scored record of a datum, its trajectory's segments whole again."""
        return cls.model_validate(
            {**datum, "trajectory": _trajectory_from_avro(datum["trajectory"])}
        )


def _trajectory_to_avro(datum: dict[str, Any]) -> dict[str, Any]:
    datum["delta_segments"] = to_wire(datum.pop("segments"))
    return datum


def _trajectory_from_avro(datum: dict[str, Any]) -> dict[str, Any]:
    out = dict(datum)
    out["segments"] = from_wire([dict(s) for s in out.pop("delta_segments", [])])
    return out
