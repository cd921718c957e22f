"""Per-trajectory facts, groups and the run summary."""

from __future__ import annotations

from rollstream.dev.demo.facts import facts_of, groups_of, summarize
from tests.schemas.samples import SCORED, TRAJECTORY


def test_facts_of_a_scored_record_and_of_a_trajectory() -> None:
    scored = facts_of(SCORED)
    assert (scored.reward, scored.scored, scored.evaluator) == (0.5, True, "command")
    assert (scored.segments, scored.tokens, scored.trainable_tokens) == (2, 6, 3)
    assert scored.policy_versions == (6, 7) and scored.task_samples == 4
    plain = facts_of(TRAJECTORY)
    assert (plain.reward, plain.scored, plain.evaluator, plain.evaluation_failed) == (
        None,
        False,
        None,
        False,
    )
    failed = facts_of(SCORED.model_copy(update={"reward": None, "error": "x"}))
    assert failed.evaluation_failed and failed.error == "x"


def test_groups_keep_first_seen_order_and_sort_members_by_sample() -> None:
    facts = [
        facts_of(
            SCORED.model_copy(
                update={
                    "trajectory": TRAJECTORY.model_copy(
                        update={"trajectory_id": t, "group_id": g, "sample_index": i, "task": None}
                    ),
                    "reward": r,
                }
            )
        )
        for t, g, i, r in [
            ("b2", "b", 2, 1.0),
            ("a1", "a", 1, None),
            ("b0", "b", 0, 0.0),
            ("a0", "a", 0, 0.5),
        ]
    ]
    groups = groups_of(facts)
    assert [g.group_id for g in groups] == ["b", "a"]
    assert [[m.trajectory_id for m in g.members] for g in groups] == [["b0", "b2"], ["a0", "a1"]]
    assert [g.mean_reward for g in groups] == [0.5, 0.5]
    assert groups[0].expected_samples is None
    assert groups[0].trainable_tokens == 2 * TRAJECTORY.trainable_tokens

    summary = summarize(facts)
    assert (summary.trajectories, summary.groups, summary.scored, summary.rewarded) == (4, 2, 4, 3)
    assert summary.evaluation_errors == 1 and summary.mean_reward == 0.5
    assert summary.tokens == 4 * 6 and summary.segments == 8
    assert summary.policy_versions == (6, 7) and summary.strategies == ("prefix_merge",)


def test_an_empty_run() -> None:
    summary = summarize([])
    assert summary.trajectories == 0 and summary.mean_reward is None and groups_of([]) == []
