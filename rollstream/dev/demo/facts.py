"""The numbers the demo's closing table shows: per trajectory, per group, for the run. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean

from rollstream.schemas import Scored, Trajectory

Reportable = Scored | Trajectory


@dataclass(frozen=True)
class TrajectoryFacts:
    """What the summary and the group table need of one record (no tokens)."""

    trajectory_id: str
    session_id: str
    task_id: str
    group_id: str
    sample_index: int
    harness: str
    strategy: str
    status: str
    session_status: str
    scored: bool
    reward: float | None
    error: str | None
    evaluator: str | None
    segments: int
    tokens: int
    trainable_tokens: int
    policy_versions: tuple[int, ...]
    task_samples: int | None  # the samples the task asked for, when the record carries it

    @property
    def evaluation_failed(self) -> bool:
        """Scored, but without a reward (the evaluator failed)."""
        return self.scored and self.reward is None


def trajectory_of(record: Reportable) -> Trajectory:
    """The trajectory a record carries."""
    return record.trajectory if isinstance(record, Scored) else record


def facts_of(record: Reportable) -> TrajectoryFacts:
    """The facts of one scored record or trajectory."""
    trajectory = trajectory_of(record)
    scored = record if isinstance(record, Scored) else None
    return TrajectoryFacts(
        trajectory_id=trajectory.trajectory_id,
        session_id=trajectory.session_id,
        task_id=trajectory.task_id,
        group_id=trajectory.group_id,
        sample_index=trajectory.sample_index,
        harness=trajectory.harness,
        strategy=trajectory.strategy,
        status=trajectory.status.value,
        session_status=trajectory.session_status.value,
        scored=scored is not None,
        reward=scored.reward if scored is not None else None,
        error=scored.error if scored is not None else None,
        evaluator=scored.evaluator if scored is not None else None,
        segments=len(trajectory.segments),
        tokens=sum(len(s.input_ids) for s in trajectory.segments),
        trainable_tokens=trajectory.trainable_tokens,
        policy_versions=tuple(trajectory.policy_versions),
        task_samples=trajectory.task.samples if trajectory.task is not None else None,
    )


def mean_reward(facts: Iterable[TrajectoryFacts]) -> float | None:
    """The mean of the rewards there are, or None when there is none."""
    rewards = [f.reward for f in facts if f.reward is not None]
    return fmean(rewards) if rewards else None


@dataclass(frozen=True)
class GroupFacts:
    """One GRPO group: its trajectories in sample order."""

    group_id: str
    members: tuple[TrajectoryFacts, ...]

    @property
    def task_ids(self) -> list[str]:
        """The tasks of the group's trajectories (one, unless records disagree)."""
        return sorted({m.task_id for m in self.members})

    @property
    def expected_samples(self) -> int | None:
        """The samples the task asked for, when known."""
        return max(
            (m.task_samples for m in self.members if m.task_samples is not None), default=None
        )

    @property
    def mean_reward(self) -> float | None:
        """Mean over the members with a reward."""
        return mean_reward(self.members)

    @property
    def trainable_tokens(self) -> int:
        """Loss-mask-1 tokens over the group."""
        return sum(m.trainable_tokens for m in self.members)


def groups_of(facts: Iterable[TrajectoryFacts]) -> list[GroupFacts]:
    """The groups, in the order their first trajectory came; members by sample index."""
    members: dict[str, list[TrajectoryFacts]] = {}
    for f in facts:
        members.setdefault(f.group_id, []).append(f)
    return [
        GroupFacts(group_id, tuple(sorted(found, key=lambda f: (f.sample_index, f.trajectory_id))))
        for group_id, found in members.items()
    ]


@dataclass(frozen=True)
class RunSummary:
    """The numbers at the top of the page."""

    trajectories: int
    groups: int
    scored: int
    rewarded: int
    evaluation_errors: int
    mean_reward: float | None
    segments: int
    tokens: int
    trainable_tokens: int
    strategies: tuple[str, ...]
    harnesses: tuple[str, ...]
    policy_versions: tuple[int, ...]


def summarize(facts: Sequence[TrajectoryFacts]) -> RunSummary:
    """The run's totals over every trajectory read (shown or not)."""
    return RunSummary(
        trajectories=len(facts),
        groups=len({f.group_id for f in facts}),
        scored=sum(f.scored for f in facts),
        rewarded=sum(f.reward is not None for f in facts),
        evaluation_errors=sum(f.evaluation_failed for f in facts),
        mean_reward=mean_reward(facts),
        segments=sum(f.segments for f in facts),
        tokens=sum(f.tokens for f in facts),
        trainable_tokens=sum(f.trainable_tokens for f in facts),
        strategies=tuple(sorted({f.strategy for f in facts})),
        harnesses=tuple(sorted({f.harness for f in facts if f.harness})),
        policy_versions=tuple(sorted({v for f in facts for v in f.policy_versions})),
    )
