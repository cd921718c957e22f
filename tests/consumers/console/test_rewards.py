"""Groups, advantages, reward series and staleness from scored records."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import numpy as np
import pytest

from rollstream.consumers.console.rewards import Rewards
from rollstream.consumers.trainer.batch import group_advantages
from rollstream.schemas import Scored
from tests.schemas.samples import SCORED


def _scored(tid: str, group: str, reward: float | None, versions: list[int], at: int = 0) -> Scored:
    trajectory = SCORED.trajectory.model_copy(
        update={
            "trajectory_id": tid,
            "session_id": f"s-{tid}",
            "group_id": group,
            "task_id": f"task-{group}",
            "sample_index": int(tid[-1]),
            "policy_versions": versions,
        }
    )
    return SCORED.model_copy(
        update={
            "trajectory": trajectory,
            "reward": reward,
            "scored_at": SCORED.scored_at + timedelta(seconds=at),
        }
    )


def test_each_group_has_the_trainers_advantages() -> None:
    rewards = Rewards()
    records = [_scored(f"t{i}", "g", r, [0]) for i, r in enumerate([1.0, 0.0, 0.0, 0.5])]
    for record in records:
        rewards.scored(record)
    [group] = rewards.page({}, 0, 10)["items"]
    shown = [m["advantage"] for m in group["members"]]
    # (r - mean) / std by hand: mean 0.375, std sqrt(0.171875).
    std = 0.171875**0.5
    expected = [(r - 0.375) / std for r in (1.0, 0.0, 0.0, 0.5)]
    np.testing.assert_allclose(shown, expected, rtol=1e-5)
    np.testing.assert_allclose(shown, group_advantages(records), rtol=1e-6)  # the trainer's
    assert group["mean_reward"] == pytest.approx(0.375)
    assert group["solved_rate"] == 0.25


def test_a_member_without_reward_has_no_advantage_and_the_others_keep_theirs() -> None:
    rewards = Rewards()
    for i, r in enumerate([1.0, None, 0.0]):
        rewards.scored(_scored(f"t{i}", "g", r, [0]))
    members = rewards.page({}, 0, 10)["items"][0]["members"]
    assert [m["advantage"] is None for m in members] == [False, True, False]
    assert members[0]["advantage"] == pytest.approx(1.0, rel=1e-5)


def test_a_record_scored_again_replaces_its_member_and_counts_once() -> None:
    rewards = Rewards()
    rewards.scored(_scored("t0", "g", 0.0, [0]))
    rewards.scored(_scored("t0", "g", 1.0, [0]))
    [member] = rewards.page({}, 0, 10)["items"][0]["members"]
    assert member["reward"] == 1.0
    series = rewards.series()
    assert sum(series["by_time"]["count"]) == 1
    assert [v["count"] for v in series["by_version"]] == [1]
    assert series["staleness"] == [{"staleness": 0, "count": 1}]


def test_the_same_group_id_under_another_task_is_another_group() -> None:
    rewards = Rewards()
    first = _scored("t0", "g", 1.0, [0])
    other = first.model_copy(
        update={
            "trajectory": first.trajectory.model_copy(
                update={"task_id": "epoch-2", "trajectory_id": "t1"}
            )
        }
    )
    rewards.scored(first)
    rewards.scored(other)
    page = rewards.page({}, 0, 10)
    assert page["total"] == 2
    assert all(len(g["members"]) == 1 for g in page["items"])


def test_a_reward_that_is_not_a_number_counts_as_none() -> None:
    rewards = Rewards()
    rewards.scored(_scored("t0", "g", float("nan"), [0]))
    rewards.scored(_scored("t1", "g", 1.0, [0]))
    members = rewards.page({}, 0, 10)["items"][0]["members"]
    assert [m["reward"] for m in members] == [None, 1.0]
    assert rewards.series()["by_version"][0]["mean_reward"] == 1.0


def test_series_by_time_and_version_and_staleness() -> None:
    rewards = Rewards(bucket_s=10)
    rewards.scored(_scored("t0", "a", 1.0, [0], at=0))
    rewards.scored(_scored("t1", "a", 0.0, [0], at=1))
    rewards.policy_version(2)
    rewards.scored(_scored("t2", "b", 1.0, [1, 2], at=25))
    series = rewards.series()
    seconds = [int((SCORED.scored_at + timedelta(seconds=d)).timestamp()) for d in (0, 1, 25)]
    buckets = Counter(s - s % 10 for s in seconds)
    assert series["by_time"]["t"] == sorted(buckets)
    assert series["by_time"]["count"] == [buckets[t] for t in sorted(buckets)]
    by_version = {v["policy_version"]: v for v in series["by_version"]}
    assert by_version[0]["mean_reward"] == 0.5 and by_version[1]["solved_rate"] == 1.0
    # t0 and t1 were scored while 0 was the newest version; t2 started on 1 while 2 was out.
    assert series["staleness"] == [{"staleness": 0, "count": 2}, {"staleness": 1, "count": 1}]
    assert series["latest_policy_version"] == 2


def test_groups_page_newest_first_and_by_task() -> None:
    rewards = Rewards()
    for g in ("g1", "g2", "g3"):
        rewards.scored(_scored("t0", g, 1.0, [0]))
    page = rewards.page({"task_id": ""}, 0, 2)
    assert page["total"] == 3 and [g["group_id"] for g in page["items"]] == ["g3", "g2"]
    assert rewards.page({"task_id": "task-g1"}, 0, 5)["total"] == 1
