"""Settings of the trainer client (``ROLLSTREAM_TRAINER_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

StreamMode = Literal["groups", "batches"]
IncompletePolicy = Literal["drop", "yield"]
TasklessPolicy = Literal["skip", "session"]


class TrainerSettings(BaseSettings):
    """What a trainer reads, how records are grouped, and when a group is given up on."""

    model_config = SettingsConfigDict(env_prefix="ROLLSTREAM_TRAINER_", frozen=True, extra="ignore")

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
