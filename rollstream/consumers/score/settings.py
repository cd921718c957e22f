"""Settings of the scorer service (``ROLLSTREAM_SCORE_*``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Slack on top of the worst-case time of one batch before the group gives up on a member.
_POLL_SLACK_S = 60.0


class ScoreSettings(BaseSettings):
    """Which topics, which consumer group, how many evaluations at once and for how long."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_SCORE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    group_id: str = Field(
        default="scorer", description="Consumer group (and the prefix of the transactional id)."
    )
    instance: str | None = Field(
        default=None,
        description="Ignored, kept so that command lines and environments written for earlier "
        "versions still start: transactional ids now belong to input partitions, the same on "
        "every instance.",
    )
    input: str = Field(
        default="trajectories",
        description="Input topic (logical name, e.g. trajectories.NAME of a replay, or full name).",
    )
    output: str = Field(default="scored", description="Output topic (logical name or full name).")
    concurrency: int = Field(default=2, ge=1, description="Evaluations running at once.")
    evaluator_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Bound on one evaluation (workspace, setup and command included); also "
        "the default timeout of a command evaluator's command.",
    )
    default_evaluator: str = Field(
        default="session_completed",
        description="Evaluator for trajectories whose task names none (or that have no task).",
    )
    work_root: Path | None = Field(
        default=None,
        description="Where command evaluators make their scratch directories. Default: the "
        "system temporary directory.",
    )
    max_batch_records: int = Field(
        default=32,
        ge=1,
        description="Records read per poll: evaluated together, committed in one transaction.",
    )
    keep_workdirs: bool = Field(
        default=False, description="Keep the command evaluators' scratch directories."
    )
    runtime: Literal["local", "docker"] = Field(
        default="local",
        description="Where command evaluators run the task's setup, the session's diff and the "
        "command: local processes, or a fresh container per evaluation (no network).",
    )
    isolation: Literal["namespace", "none"] = Field(
        default="namespace",
        description="Network of the commands run on the policy's work (the session's diff, the "
        "check) with the local runtime: namespace gives each its own network namespace with "
        "loopback alone (no broker, no control plane; refused at start where namespaces are "
        "not allowed); none: the host's network. The docker runtime's containers have none.",
    )
    docker_image: str = Field(
        default="rollstream-base:trixie",
        description="Image of the command evaluators' containers (docker runtime); it must be "
        "in the engine already.",
    )
    docker_cpus: float = Field(
        default=1.0, gt=0, description="CPUs of one evaluation's container (docker runtime)."
    )
    docker_memory: str = Field(
        default="2g", description="Memory (and swap) of one evaluation's container, e.g. 2g."
    )

    @property
    def max_poll_interval_ms(self) -> int:
        """How long one batch may take to evaluate before the group counts this member gone.

        A batch runs ``concurrency`` evaluations at a time, each bounded by the evaluator
        timeout; the consumer does not poll meanwhile, so the bound must cover them all.
        """
        rounds = math.ceil(self.max_batch_records / self.concurrency)
        return int((rounds * self.evaluator_timeout_s + _POLL_SLACK_S) * 1000)
