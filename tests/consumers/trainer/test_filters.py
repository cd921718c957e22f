"""The filters of TrainerSettings: groups dropped by status, uniform rewards or trainable tokens.

Every sample trajectory (tests/schemas/samples.py) has status incomplete, session status
completed, and 3 tokens with loss mask 1 (2 in its first segment, 1 in its second).
"""

from __future__ import annotations

from typing import Any

import pytest

from rollstream.consumers.trainer import Group, GroupAssembler, RecordBatch, TrainerSettings
from rollstream.consumers.trainer.filters import rejected_group, uniform_rewards
from rollstream.schemas import (
    LossMask,
    Scored,
    SessionStatus,
    TrajectoryStatus,
)
from tests.consumers.trainer.records import group_of, scored

TOPIC = "rollstream.scored"


def changed(record: Scored, **trajectory: Any) -> Scored:
    """``record`` with its trajectory's fields replaced."""
    return record.model_copy(update={"trajectory": record.trajectory.model_copy(update=trajectory)})


def with_trainable(record: Scored, tokens: int) -> Scored:
    """``record`` whose first segment has ``tokens`` tokens with loss mask 1, its second none."""
    first, second = record.trajectory.segments
    n = len(first.input_ids)
    first = first.model_copy(
        update={"loss_mask": LossMask.from_list([1] * tokens + [0] * (n - tokens))}
    )
    second = second.model_copy(
        update={"loss_mask": LossMask.from_list([0] * len(second.input_ids))}
    )
    return changed(record, segments=[first, second])


def feed(assembler: GroupAssembler, records: list[Scored], start: int = 0) -> list[Group]:
    """Add ``records`` to partition 0 from offset ``start``; the groups popped after each."""
    out = []
    for offset, record in enumerate(records, start):
        assembler.add((TOPIC, 0), offset, record, now=0.0)
        while (item := assembler.pop()) is not None:
            assert isinstance(item, Group)
            out.append(item)
    return out


def test_by_default_nothing_is_filtered() -> None:
    settings = TrainerSettings()
    assert not settings.filters
    records = group_of("u", 2, rewards=[1.0, 1.0])  # uniform rewards, incomplete status
    records += [with_trainable(r, 0) for r in group_of("empty", 2)]  # nothing to train on
    records += [changed(r, session_status=SessionStatus.FAILED) for r in group_of("f", 1)]
    assembler = GroupAssembler(settings)
    assert [g.group_id for g in feed(assembler, records)] == ["u", "empty", "f"]
    m = assembler.metrics
    assert (m.dropped_status, m.dropped_uniform, m.dropped_tokens) == (0, 0, 0)


def test_groups_with_a_trajectory_of_a_status_not_kept_are_dropped_counted_and_committed() -> None:
    settings = TrainerSettings(statuses=[TrajectoryStatus.COMPLETE])
    done = [changed(r, status=TrajectoryStatus.COMPLETE) for r in group_of("done", 2)]
    mixed = group_of("mixed", 2)
    mixed[0] = changed(mixed[0], status=TrajectoryStatus.COMPLETE)  # the other is incomplete
    assembler = GroupAssembler(settings)
    assert [g.group_id for g in feed(assembler, mixed + done)] == ["done"]
    m = assembler.metrics
    assert (m.dropped_status, m.dropped_records, m.delivered_groups) == (1, 2, 1)
    assert assembler.safe_offsets() == {(TOPIC, 0): 4}  # the dropped group is committed past


def test_session_statuses_keep_only_sessions_that_ended_so() -> None:
    settings = TrainerSettings(session_statuses="completed, timeout")
    assert settings.session_statuses == frozenset({SessionStatus.COMPLETED, SessionStatus.TIMEOUT})
    timeout = [changed(r, session_status=SessionStatus.TIMEOUT) for r in group_of("t", 2)]
    failed = group_of("f", 2)
    failed[1] = changed(failed[1], session_status=SessionStatus.FAILED)
    assembler = GroupAssembler(settings)
    assert [g.group_id for g in feed(assembler, failed + timeout)] == ["t"]
    assert assembler.metrics.dropped_status == 1


def test_uniform_rewards_are_those_that_give_no_advantage() -> None:
    assert uniform_rewards(group_of("a", 3, rewards=[0.5, 0.5, 0.5]))
    assert uniform_rewards(group_of("a", 3, rewards=[0.5, None, 0.5]))  # None is left out
    assert uniform_rewards(group_of("a", 2, rewards=[1.0, None]))  # one scored sample
    assert uniform_rewards(group_of("a", 2, rewards=[None, None]))  # unscored
    assert not uniform_rewards(group_of("a", 3, rewards=[0.5, None, 0.0]))


def test_groups_whose_rewards_are_all_equal_are_dropped() -> None:
    settings = TrainerSettings(drop_uniform_rewards=True)
    records = group_of("same", 2, rewards=[1.0, 1.0]) + group_of("diff", 2, rewards=[1.0, 0.0])
    records += group_of("one", 2, rewards=[1.0, None])
    assembler = GroupAssembler(settings)
    assert [g.group_id for g in feed(assembler, records)] == ["diff"]
    m = assembler.metrics
    assert (m.dropped_uniform, m.dropped_records, m.delivered_groups) == (2, 4, 1)
    assert assembler.safe_offsets() == {(TOPIC, 0): 6}


def test_min_trainable_tokens_judges_each_trajectory() -> None:
    settings = TrainerSettings(min_trainable_tokens=2)
    short = group_of("short", 2)
    short[1] = with_trainable(short[1], 1)  # one of its trajectories has 1 trainable token
    enough = [with_trainable(r, 2) for r in group_of("enough", 2)]
    assembler = GroupAssembler(settings)
    assert [g.group_id for g in feed(assembler, short + enough)] == ["enough"]
    assert (assembler.metrics.dropped_tokens, assembler.metrics.dropped_records) == (1, 2)


def test_min_group_trainable_tokens_judges_the_group_in_all() -> None:
    settings = TrainerSettings(min_group_trainable_tokens=4)
    three = [with_trainable(r, t) for r, t in zip(group_of("three", 2), [3, 0], strict=True)]
    four = [with_trainable(r, t) for r, t in zip(group_of("four", 2), [4, 0], strict=True)]
    assembler = GroupAssembler(settings)
    assert [g.group_id for g in feed(assembler, three + four)] == ["four"]
    assert assembler.metrics.dropped_tokens == 1


def test_a_group_is_counted_under_the_first_reason_only() -> None:
    settings = TrainerSettings(
        statuses="complete",
        drop_uniform_rewards=True,
        min_trainable_tokens=10,
    )
    records = group_of("all", 2, rewards=[1.0, 1.0])  # incomplete, 3 tokens, uniform
    assert rejected_group(records, settings) == "status"
    records = [changed(r, status=TrajectoryStatus.COMPLETE) for r in records]
    assert rejected_group(records, settings) == "tokens"
    relaxed = settings.model_copy(update={"min_trainable_tokens": 0})
    assert rejected_group(records, relaxed) == "uniform"


def test_stale_groups_are_counted_stale_before_any_filter() -> None:
    settings = TrainerSettings(max_staleness=0, drop_uniform_rewards=True)
    assembler = GroupAssembler(settings)
    assembler.policy_version = 8
    assert feed(assembler, group_of("old", 2, rewards=[1.0, 1.0])) == []  # version 7
    assert (assembler.metrics.dropped_stale, assembler.metrics.dropped_uniform) == (1, 0)


def test_partial_groups_yielded_after_a_timeout_are_filtered_too() -> None:
    settings = TrainerSettings(group_timeout_s=1, incomplete="yield", drop_uniform_rewards=True)
    assembler = GroupAssembler(settings)
    assembler.add((TOPIC, 0), 0, scored("p", 0, samples=3, reward=1.0), now=0.0)
    assembler.expire(1.0)
    assert assembler.pop() is None and assembler.metrics.dropped_uniform == 1
    assert assembler.safe_offsets() == {(TOPIC, 0): 1}


def test_batches_mode_filters_each_record() -> None:
    settings = TrainerSettings(
        mode="batches",
        batch_size=4,
        session_statuses="completed",
        min_trainable_tokens=3,
    )
    records = group_of("a", 4)
    records[1] = changed(records[1], session_status=SessionStatus.CANCELLED)
    records[2] = with_trainable(records[2], 2)
    assembler = GroupAssembler(settings)
    for offset, record in enumerate(records):
        assembler.add((TOPIC, 0), offset, record, now=0.0)
    batch = assembler.pop()
    assert isinstance(batch, RecordBatch) and batch.records == (records[0], records[3])
    m = assembler.metrics
    assert (m.dropped_status, m.dropped_tokens, m.dropped_records) == (1, 1, 2)
    assert assembler.safe_offsets() == {(TOPIC, 0): 4}


@pytest.mark.parametrize("field", ["drop_uniform_rewards", "min_group_trainable_tokens"])
def test_group_filters_need_groups_mode(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} needs mode groups"):
        TrainerSettings(mode="batches", **{field: 1})  # type: ignore[arg-type]
