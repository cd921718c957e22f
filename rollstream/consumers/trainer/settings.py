"""Settings of the trainer client (``ROLLSTREAM_TRAINER_*``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from rollstream.schemas.sessions import SessionStatus
from rollstream.schemas.trajectories import TrajectoryStatus

StreamMode = Literal["groups", "batches"]
IncompletePolicy = Literal["drop", "yield"]
TasklessPolicy = Literal["skip", "session"]
StartPosition = Literal["earliest", "latest"] | AwareDatetime
"""Where a partition without a committed offset is read from: its start, its end, or a time."""


class TrainerSettings(BaseSettings):
    """What a trainer reads, how records are grouped, and when a group is given up on."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_TRAINER_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    topic: str = Field(
        default="scored",
        description="Topic to read (logical name such as scored or trajectories, or a full "
        "name). Trajectory records are read as scored records with reward None.",
    )
    mode: StreamMode = Field(
        default="groups",
        description="groups: complete GRPO groups (all samples of one task and group); "
        "batches: plain batches of batch_size records.",
    )
    group_size: int | None = Field(
        default=None,
        ge=1,
        description="Samples per group for trajectories that do not carry their task but "
        "name a group (those that carry it use task.samples).",
    )
    taskless: TasklessPolicy = Field(
        default="skip",
        description="A trajectory that cannot be grouped (no task, and no group_size or no "
        "group id, e.g. calls recorded under the anonymous session): skip it (logged, counted "
        "in metrics.taskless, committed past) or session (yield it as a group of one keyed by "
        "its session; such a group carries no GRPO advantage).",
    )
    group_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="A group still incomplete this long after its first record is handled "
        "per `incomplete`. None: wait forever.",
    )
    incomplete: IncompletePolicy = Field(
        default="drop",
        description="What to do with a group that timed out: drop it or yield it partial.",
    )
    max_staleness: int | None = Field(
        default=None,
        ge=0,
        description="Drop a group whose oldest policy version is more than this many versions "
        "behind the trainer's. None: no bound.",
    )
    batch_size: int = Field(default=32, ge=1, description="Records per batch in batches mode.")
    batch_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="In batches mode, yield a short batch this long after its first record. "
        "None: only full batches.",
    )
    dedupe_window: int = Field(
        default=1_000_000,
        ge=1,
        description="How many finished trajectory ids (and groups) are remembered to ignore "
        "re-deliveries.",
    )
    position_groups: int = Field(
        default=10_000,
        ge=0,
        description="How many recently finished groups a position (checkpoint) names, so "
        "re-delivered copies of their records are ignored after a resume.",
    )
    poll_timeout_ms: int = Field(
        default=200, ge=1, description="Longest wait of one poll (bounds timeout latency)."
    )
    max_poll_records: int = Field(default=500, ge=1, description="Records read per poll.")
    max_poll_interval_ms: int = Field(
        default=300_000,
        ge=1,
        description="Longest time between two requests for the next group before the broker "
        "deems the trainer gone and hands its partitions to other members of its group "
        "(metrics.revoked_partitions); it must exceed the longest training step.",
    )
    start: StartPosition = Field(
        default="earliest",
        description="Where a partition the consumer group has no committed offset for is read "
        "from: earliest (everything kept), latest (only what is written from now on), or an "
        "ISO-8601 time with its zone (the first record written at or after it).",
    )
    statuses: Annotated[frozenset[TrajectoryStatus] | None, NoDecode] = Field(
        default=None,
        description="Trajectory statuses to keep (comma-separated, e.g. complete): a group with "
        "a trajectory of another status is dropped (metrics.dropped_status; in batches mode, "
        "that trajectory). Default: every status.",
    )
    session_statuses: Annotated[frozenset[SessionStatus] | None, NoDecode] = Field(
        default=None,
        description="Session statuses to keep (comma-separated, e.g. completed,timeout): a "
        "group with a session that ended otherwise is dropped (metrics.dropped_status; in "
        "batches mode, that trajectory). Default: every status.",
    )
    drop_uniform_rewards: bool = Field(
        default=False,
        description="Drop a group whose scored rewards are all equal, or with fewer than two "
        "scored (metrics.dropped_uniform): its GRPO advantages are all 0. Groups mode only.",
    )
    min_trainable_tokens: int = Field(
        default=0,
        ge=0,
        description="Drop a group with a trajectory that has fewer tokens with loss mask 1 "
        "(metrics.dropped_tokens; in batches mode, drop that trajectory).",
    )
    min_group_trainable_tokens: int = Field(
        default=0,
        ge=0,
        description="Drop a group whose trajectories have fewer tokens with loss mask 1 in all "
        "(metrics.dropped_tokens). Groups mode only.",
    )

    @field_validator("statuses", "session_statuses", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """A variable holds the statuses comma-separated; an empty one keeps every status."""
        if isinstance(value, str):
            parts = [part.strip() for part in value.split(",") if part.strip()]
            return frozenset(parts) if parts else None
        if value is not None and not value:  # keeping no status at all would train on nothing
            raise ValueError("name at least one status to keep, or None to keep every status")
        return value

    @model_validator(mode="after")
    def _filters_fit_the_mode(self) -> TrainerSettings:
        if self.mode == "batches":  # a plain batch mixes groups: no group to judge
            if self.drop_uniform_rewards:
                raise ValueError("drop_uniform_rewards needs mode groups")
            if self.min_group_trainable_tokens:
                raise ValueError("min_group_trainable_tokens needs mode groups")
        return self

    @property
    def filters(self) -> bool:
        """Whether any filter (statuses, uniform rewards, trainable tokens) is set."""
        return (
            self.statuses is not None
            or self.session_statuses is not None
            or self.drop_uniform_rewards
            or self.min_trainable_tokens > 0
            or self.min_group_trainable_tokens > 0
        )
