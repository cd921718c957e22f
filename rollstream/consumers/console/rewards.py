"""GRPO groups and rewards as the console shows them: members, advantages, series. Pure.

A scored record adds a member to its group (a record scored again replaces its member). Each
group's advantages are the trainer's own (``consumers.trainer.batch.advantages``), so what the
console shows is what a GRPO step would weigh. Rewards are also bucketed by when they were
scored and by policy version, and each record's staleness (how many policy versions behind the
newest it was when scored) is counted: server-side aggregates, a few numbers per bucket.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from rollstream.consumers.console.fleet import finite, page_of
from rollstream.consumers.trainer.batch import advantages
from rollstream.schemas import Scored

#: The filters a page of groups takes.
GROUP_FILTERS = ("task_id",)


@dataclass
class Member:
    """One scored trajectory of a group."""

    trajectory_id: str
    session_id: str
    sample_index: int
    reward: float | None
    status: str


@dataclass
class GroupRow:
    """One GRPO group: its task, its members by trajectory id, the policy versions they used."""

    group_id: str
    task_id: str
    members: dict[str, Member] = field(default_factory=dict)
    policy_versions: set[int] = field(default_factory=set)

    def public(self, solved_at: float) -> dict[str, Any]:
        """The group as the API sends it, with each member's advantage."""
        members = sorted(self.members.values(), key=lambda m: (m.sample_index, m.trajectory_id))
        rewarded = [m for m in members if m.reward is not None]
        weights = advantages([m.reward for m in rewarded if m.reward is not None])
        advantage = {m.trajectory_id: float(a) for m, a in zip(rewarded, weights, strict=True)}
        rewards = [m.reward for m in rewarded if m.reward is not None]
        return {
            "group_id": self.group_id,
            "task_id": self.task_id,
            "mean_reward": fmean(rewards) if rewards else None,
            "solved_rate": sum(r >= solved_at for r in rewards) / len(rewards) if rewards else None,
            "policy_versions": sorted(self.policy_versions),
            "members": [
                {
                    "trajectory_id": m.trajectory_id,
                    "session_id": m.session_id,
                    "sample_index": m.sample_index,
                    "reward": m.reward,
                    "advantage": advantage.get(m.trajectory_id),
                    "status": m.status,
                }
                for m in members
            ],
        }


@dataclass
class _Bucket:
    rewards: float = 0.0
    rewarded: int = 0
    solved: int = 0
    count: int = 0

    def add(self, reward: float | None, solved_at: float) -> None:
        self.count += 1
        if reward is not None:
            self.rewards += reward
            self.rewarded += 1
            self.solved += reward >= solved_at

    def mean(self) -> float | None:
        return self.rewards / self.rewarded if self.rewarded else None

    def solved_rate(self) -> float | None:
        return self.solved / self.rewarded if self.rewarded else None


class Rewards:
    """Groups, reward series and staleness from the scored records seen so far."""

    def __init__(
        self, *, max_groups: int = 100_000, bucket_s: int = 10, solved_at: float = 1.0
    ) -> None:
        self.max_groups = max_groups
        self.bucket_s = bucket_s
        self.solved_at = solved_at
        # By (task, group), as the trainer groups records: a group id reused by another task
        # (the same instance in a later epoch) is another group.
        self.groups: OrderedDict[tuple[str, str], GroupRow] = OrderedDict()
        self.latest_policy_version = 0
        self._by_time: dict[int, _Bucket] = defaultdict(_Bucket)
        self._by_version: dict[int, _Bucket] = defaultdict(_Bucket)
        self._staleness: Counter[int] = Counter()

    def policy_version(self, version: int) -> None:
        """A trainer published ``version`` (or a call was stamped with it)."""
        self.latest_policy_version = max(self.latest_policy_version, version)

    def scored(self, record: Scored) -> None:
        """Add a scored record to its group and, the first time it is scored, to the series.

        A trajectory scored again (a replay's scorer, a re-run) replaces its member; the series
        count each trajectory once. A reward that is not a finite number counts as none.
        """
        trajectory = record.trajectory
        versions = trajectory.policy_versions
        for version in versions:
            self.policy_version(version)
        key = (trajectory.task_id, trajectory.group_id)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = GroupRow(trajectory.group_id, trajectory.task_id)
            while len(self.groups) > self.max_groups:
                self.groups.popitem(last=False)
        reward = finite(record.reward)
        again = trajectory.trajectory_id in group.members
        group.members[trajectory.trajectory_id] = Member(
            trajectory.trajectory_id,
            trajectory.session_id,
            trajectory.sample_index,
            reward,
            trajectory.session_status.value,
        )
        group.policy_versions.update(versions)
        if again:
            return
        oldest = min(versions, default=0)
        second = int(record.scored_at.timestamp())
        self._by_time[second - second % self.bucket_s].add(reward, self.solved_at)
        self._by_version[oldest].add(reward, self.solved_at)
        self._staleness[self.latest_policy_version - oldest] += 1

    def page(self, filters: Mapping[str, str], offset: int, limit: int) -> dict[str, Any]:
        """A page of groups, newest first."""
        total, items = page_of(reversed(self.groups.values()), filters, offset, limit)
        return {
            "total": total,
            "offset": offset,
            "limit": limit,
            "items": [group.public(self.solved_at) for group in items],
        }

    def series(self) -> dict[str, Any]:
        """Reward and solved rate over time and by policy version, and staleness."""
        times = sorted(self._by_time)
        buckets = [self._by_time[t] for t in times]
        return {
            "by_time": {
                "t": [float(t) for t in times],
                "mean_reward": [b.mean() for b in buckets],
                "solved_rate": [b.solved_rate() for b in buckets],
                "count": [b.count for b in buckets],
            },
            "by_version": [
                {
                    "policy_version": v,
                    "mean_reward": b.mean(),
                    "solved_rate": b.solved_rate(),
                    "count": b.count,
                }
                for v, b in sorted(self._by_version.items())
            ],
            "staleness": [{"staleness": s, "count": n} for s, n in sorted(self._staleness.items())],
            "latest_policy_version": self.latest_policy_version,
            "solved_at": self.solved_at,
        }
