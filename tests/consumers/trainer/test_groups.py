"""The group assembler: complete groups once each, and commits that never pass a pending record."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.consumers.trainer import (
    Group,
    GroupAssembler,
    RecordBatch,
    StreamPosition,
    TrainerSettings,
)
from rollstream.schemas import Scored
from rollstream.schemas.sessions import SUPERSEDED
from tests.consumers.trainer.records import group_of, scored

TOPIC = "rollstream.scored"


@dataclass(frozen=True)
class Arrival:
    partition: int
    offset: int
    record: Scored

    @property
    def tid(self) -> str:
        return self.record.trajectory.trajectory_id


@dataclass(frozen=True)
class Scenario:
    sizes: dict[str, int]  # group -> samples
    arrivals: list[Arrival]  # global arrival order; offsets ascend per partition
    pops: list[bool]  # whether the consumer pops ready groups after each arrival

    def complete(self) -> dict[str, set[str]]:
        present: dict[str, set[str]] = {}
        for a in self.arrivals:
            present.setdefault(a.record.trajectory.group_id, set()).add(a.tid)
        return {g: ids for g, ids in present.items() if len(ids) == self.sizes[g]}


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))
    records = []
    for g, size in enumerate(sizes):
        present = draw(st.integers(0, size))  # fewer than size: the group never completes
        records += [scored(f"g{g}", i, samples=size) for i in range(present)]
    duplicates = draw(st.lists(st.sampled_from(records), max_size=6)) if records else []
    order = draw(st.permutations(records + duplicates))
    next_offset = [0, 0, 0]
    arrivals = []
    for record in order:
        partition = draw(st.integers(0, 2))
        arrivals.append(Arrival(partition, next_offset[partition], record))
        next_offset[partition] += 1
    pops = draw(st.lists(st.booleans(), min_size=len(arrivals), max_size=len(arrivals)))
    return Scenario({f"g{g}": s for g, s in enumerate(sizes)}, arrivals, pops)


def drain(assembler: GroupAssembler) -> list[Group]:
    out = []
    while (item := assembler.pop()) is not None:
        assert isinstance(item, Group)
        out.append(item)
    return out


def expected_safe(
    arrivals: list[Arrival], delivered_groups: set[str], sizes: dict[str, int]
) -> dict[tuple[str, int], int]:
    """The oracle: the first pending record of each partition, else the next offset."""
    firsts: dict[str, Arrival] = {}
    for a in arrivals:
        firsts.setdefault(a.tid, a)
    out: dict[tuple[str, int], int] = {}
    for a in arrivals:
        out[(TOPIC, a.partition)] = a.offset + 1
    for a in firsts.values():
        if a.record.trajectory.group_id not in delivered_groups:
            key = (TOPIC, a.partition)
            out[key] = min(out[key], a.offset)
    return out


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_yields_exactly_the_complete_groups_once_and_commits_never_pass_a_pending_record(
    scenario: Scenario,
) -> None:
    assembler = GroupAssembler(TrainerSettings())
    yielded: list[Group] = []
    for i, (arrival, pop) in enumerate(zip(scenario.arrivals, scenario.pops, strict=True)):
        assembler.add((TOPIC, arrival.partition), arrival.offset, arrival.record, now=float(i))
        if pop:
            yielded += drain(assembler)
        delivered = {g.group_id for g in yielded}
        assert assembler.safe_offsets() == expected_safe(
            scenario.arrivals[: i + 1], delivered, scenario.sizes
        )
    yielded += drain(assembler)
    complete = scenario.complete()
    assert sorted(g.group_id for g in yielded) == sorted(complete)  # each once
    for group in yielded:
        assert sorted(group.trajectory_ids) == sorted(complete[group.group_id])
        assert group.complete and group.size == scenario.sizes[group.group_id]
    distinct = len({a.tid for a in scenario.arrivals})
    assert assembler.metrics.duplicates == len(scenario.arrivals) - distinct
    assert assembler.metrics.delivered_groups == len(complete)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data())
def test_resuming_from_a_position_delivers_every_complete_group_exactly_once(
    scenario: Scenario, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(scenario.arrivals)))
    first = GroupAssembler(TrainerSettings())
    yielded: list[Group] = []
    for i, arrival in enumerate(scenario.arrivals[:cut]):
        first.add((TOPIC, arrival.partition), arrival.offset, arrival.record, now=float(i))
        if scenario.pops[i]:
            yielded += drain(first)
    # A checkpoint: JSON, as a trainer would store it beside its weights.
    position = StreamPosition.model_validate_json(first.position().model_dump_json())

    second = GroupAssembler(TrainerSettings())
    second.restore(position)
    start = position.offsets
    for i, arrival in enumerate(scenario.arrivals):  # each partition re-read from its offset
        if arrival.offset >= start.get((TOPIC, arrival.partition), 0):
            second.add((TOPIC, arrival.partition), arrival.offset, arrival.record, now=float(i))
    yielded += drain(second)
    complete = scenario.complete()
    assert sorted(g.group_id for g in yielded) == sorted(complete)
    for group in yielded:
        assert sorted(group.trajectory_ids) == sorted(complete[group.group_id])


def test_a_completed_group_not_yet_popped_still_holds_back_the_commit() -> None:
    assembler = GroupAssembler(TrainerSettings())
    for offset, record in enumerate(group_of("a", 2)):
        assembler.add((TOPIC, 0), offset, record, now=0.0)
    assert assembler.safe_offsets() == {(TOPIC, 0): 0}
    group = assembler.pop()
    assert isinstance(group, Group) and group.group_id == "a" and group.task_id == "task-a"
    assert assembler.safe_offsets() == {(TOPIC, 0): 2}


def test_an_incomplete_group_is_dropped_after_the_timeout_and_late_members_are_ignored() -> None:
    assembler = GroupAssembler(TrainerSettings(group_timeout_s=10))
    a0, a1, a2 = group_of("a", 3)
    assembler.add((TOPIC, 0), 0, a0, now=0.0)
    assembler.add((TOPIC, 1), 0, a1, now=4.0)
    assembler.expire(9.9)
    assert assembler.pop() is None and assembler.safe_offsets() == {(TOPIC, 0): 0, (TOPIC, 1): 0}
    assembler.expire(10.0)
    assert assembler.pop() is None
    assert assembler.metrics.dropped_incomplete == 1 and assembler.metrics.dropped_records == 2
    assert assembler.safe_offsets() == {(TOPIC, 0): 1, (TOPIC, 1): 1}
    assembler.add((TOPIC, 2), 0, a2, now=11.0)
    assert assembler.pop() is None and assembler.metrics.late == 1
    assert assembler.safe_offsets()[(TOPIC, 2)] == 1


def test_an_incomplete_group_can_be_yielded_partial_instead() -> None:
    assembler = GroupAssembler(TrainerSettings(group_timeout_s=5, incomplete="yield"))
    b0 = scored("b", 0, samples=3)
    assembler.add((TOPIC, 0), 0, b0, now=0.0)
    assembler.add((TOPIC, 0), 1, scored("c", 0, samples=2), now=1.0)
    assembler.expire(5.0)
    group = assembler.pop()
    assert isinstance(group, Group) and group.group_id == "b"
    assert not group.complete and group.records == (b0,) and group.size == 3
    assert assembler.pop() is None  # c is younger
    assert assembler.metrics.partial_groups == 1 and assembler.metrics.delivered_groups == 1
    assert assembler.safe_offsets() == {(TOPIC, 0): 1}


def test_an_attempt_handed_back_by_a_node_gives_its_place_to_the_re_run() -> None:
    """A node handing its partition over cuts a long session short; the sample runs again on
    the next owner under the same group. Counted as a member, the cut-short attempt would close
    the group first and the re-run would be dropped as late."""
    assembler = GroupAssembler(TrainerSettings())
    cut = scored("h", 0, samples=2)
    stats = cut.trajectory.stats.model_copy(update={"notes": [SUPERSEDED]})
    cut = cut.model_copy(update={"trajectory": cut.trajectory.model_copy(update={"stats": stats})})
    rerun = scored("h", 0, samples=2)
    rerun = rerun.model_copy(
        update={"trajectory": rerun.trajectory.model_copy(update={"trajectory_id": "re-run"})}
    )
    other = scored("h", 1, samples=2)
    for offset, record in enumerate((cut, other, rerun)):
        assembler.add((TOPIC, 0), offset, record, now=0.0)
    group = assembler.pop()
    assert isinstance(group, Group) and group.complete
    assert sorted(r.trajectory.trajectory_id for r in group.records) == sorted(
        r.trajectory.trajectory_id for r in (other, rerun)
    )
    assert assembler.metrics.superseded == 1 and assembler.metrics.late == 0
    assert assembler.safe_offsets() == {(TOPIC, 0): 3}


def test_groups_too_far_behind_the_policy_are_dropped_and_counted() -> None:
    assembler = GroupAssembler(TrainerSettings(max_staleness=2))
    assembler.policy_version = 10
    stale = group_of("old", 2, versions=[7, 9])  # oldest 7: three behind
    fresh = group_of("new", 2, versions=[8, 10])  # oldest 8: two behind
    unversioned = group_of("none", 1, versions=[])  # counts as version 0
    for offset, record in enumerate(stale + fresh + unversioned):
        assembler.add((TOPIC, 0), offset, record, now=0.0)
    assert [g.group_id for g in drain(assembler)] == ["new"]
    assert assembler.metrics.dropped_stale == 2 and assembler.metrics.dropped_records == 3
    assert assembler.safe_offsets() == {(TOPIC, 0): 5}


def test_staleness_is_judged_against_the_version_when_the_group_is_handed_out() -> None:
    assembler = GroupAssembler(TrainerSettings(max_staleness=0))
    assembler.policy_version = 7
    for offset, record in enumerate(group_of("a", 2, versions=[7])):
        assembler.add((TOPIC, 0), offset, record, now=0.0)
    assembler.policy_version = 8
    assert assembler.pop() is None and assembler.metrics.dropped_stale == 1


def test_without_a_bound_nothing_is_stale() -> None:
    assembler = GroupAssembler(TrainerSettings())
    assembler.policy_version = 1000
    assembler.add((TOPIC, 0), 0, scored("a", 0, samples=1, versions=[]), now=0.0)
    group = assembler.pop()
    assert isinstance(group, Group) and group.oldest_policy_version == 0


def test_group_properties() -> None:
    assembler = GroupAssembler(TrainerSettings())
    records = group_of("a", 3, rewards=[1.0, None, 0.0], versions=[4, 5])
    records[2] = records[2].model_copy(
        update={"trajectory": records[2].trajectory.model_copy(update={"policy_versions": [3]})}
    )
    for offset, record in enumerate(records):
        assembler.add((TOPIC, offset), 0, record, now=0.0)
    group = assembler.pop()
    assert isinstance(group, Group)
    assert group.rewards == [1.0, None, 0.0]
    assert group.oldest_policy_version == 3
    assert group.records == tuple(records)


def anonymous(index: int) -> Scored:
    """A trajectory of calls made outside any task (the interceptor used by hand)."""
    record = scored("", index, with_task=False)
    trajectory = record.trajectory.model_copy(
        update={"task_id": "", "group_id": "", "session_id": f"anonymous-{index}"}
    )
    return record.model_copy(update={"trajectory": trajectory})


def test_by_default_a_trajectory_without_its_task_is_skipped_counted_and_committed_past() -> None:
    assembler = GroupAssembler(TrainerSettings())
    assembler.add((TOPIC, 0), 0, scored("a", 0, with_task=False), now=0.0)
    assembler.add((TOPIC, 0), 1, anonymous(0), now=0.0)
    assert assembler.pop() is None
    assert assembler.metrics.taskless == 2
    assert assembler.safe_offsets() == {(TOPIC, 0): 2}  # a restart does not meet them again
    for offset, record in enumerate(group_of("b", 2), start=2):  # and the stream goes on
        assembler.add((TOPIC, 0), offset, record, now=0.0)
    group = assembler.pop()
    assert isinstance(group, Group) and group.group_id == "b"
    assert assembler.safe_offsets() == {(TOPIC, 0): 4}


def test_group_size_groups_task_less_trajectories_that_name_a_group() -> None:
    assembler = GroupAssembler(TrainerSettings(group_size=2))
    assembler.add((TOPIC, 0), 0, scored("a", 0, with_task=False), now=0.0)
    assert assembler.pop() is None
    assembler.add((TOPIC, 0), 1, scored("a", 1, with_task=False), now=0.0)
    group = assembler.pop()
    assert isinstance(group, Group) and group.size == 2 and len(group.records) == 2


def test_group_size_does_not_lump_sessions_without_a_group_together() -> None:
    assembler = GroupAssembler(TrainerSettings(group_size=2))
    assembler.add((TOPIC, 0), 0, anonymous(0), now=0.0)
    assembler.add((TOPIC, 0), 1, anonymous(1), now=0.0)
    assert assembler.pop() is None  # unrelated sessions: no group of theirs
    assert assembler.metrics.taskless == 2 and assembler.safe_offsets() == {(TOPIC, 0): 2}


def test_taskless_session_yields_each_such_trajectory_as_a_group_of_one() -> None:
    assembler = GroupAssembler(TrainerSettings(taskless="session"))
    assembler.add((TOPIC, 0), 0, anonymous(0), now=0.0)
    assembler.add((TOPIC, 0), 1, anonymous(1), now=0.0)
    first, second = assembler.pop(), assembler.pop()
    assert isinstance(first, Group) and isinstance(second, Group)
    assert [(g.group_id, g.size, g.complete) for g in (first, second)] == [
        ("anonymous-0", 1, True),
        ("anonymous-1", 1, True),
    ]
    assert assembler.metrics.taskless == 0 and assembler.safe_offsets() == {(TOPIC, 0): 2}


def test_a_record_the_stream_could_not_use_is_counted_and_committed_past() -> None:
    assembler = GroupAssembler(TrainerSettings())
    assembler.add((TOPIC, 0), 0, scored("a", 0, samples=2), now=0.0)
    assembler.skip((TOPIC, 0), 1)
    assert assembler.metrics.unusable == 1
    assert assembler.safe_offsets() == {(TOPIC, 0): 0}  # the pending sample still holds it
    assembler.add((TOPIC, 0), 2, scored("a", 1, samples=2), now=0.0)
    assert isinstance(assembler.pop(), Group)
    assert assembler.safe_offsets() == {(TOPIC, 0): 3}


def test_the_task_decides_the_group_size_over_the_setting() -> None:
    assembler = GroupAssembler(TrainerSettings(group_size=5))
    for offset, record in enumerate(group_of("a", 2)):
        assembler.add((TOPIC, 0), offset, record, now=0.0)
    group = assembler.pop()
    assert isinstance(group, Group) and group.size == 2


def test_undecodable_records_are_counted_and_do_not_hold_back_commits() -> None:
    assembler = GroupAssembler(TrainerSettings())
    assembler.add((TOPIC, 0), 0, None, now=0.0)
    assert assembler.metrics.undecodable == 1
    assert assembler.safe_offsets() == {(TOPIC, 0): 1}


def test_released_partitions_take_their_members_out_of_groups() -> None:
    assembler = GroupAssembler(TrainerSettings())
    a0, a1 = group_of("a", 2)
    assembler.add((TOPIC, 0), 0, a0, now=0.0)
    assembler.add((TOPIC, 1), 0, a1, now=0.0)  # complete, not yet popped
    assembler.release([(TOPIC, 1)])
    assert assembler.pop() is None
    assert assembler.safe_offsets() == {(TOPIC, 0): 0}  # partition 1 is forgotten
    assembler.add((TOPIC, 1), 0, a1, now=1.0)  # read again after reassignment
    group = assembler.pop()
    assert isinstance(group, Group) and group.trajectory_ids == [
        a0.trajectory.trajectory_id,
        a1.trajectory.trajectory_id,
    ]


def test_batches_mode_yields_fixed_size_batches_in_arrival_order() -> None:
    assembler = GroupAssembler(TrainerSettings(mode="batches", batch_size=3))
    records = group_of("a", 4) + group_of("b", 3)
    for offset, record in enumerate(records):
        assembler.add((TOPIC, offset % 2), offset // 2, record, now=0.0)
    batches = []
    while (item := assembler.pop()) is not None:
        assert isinstance(item, RecordBatch)
        batches.append(item.records)
    assert batches == [tuple(records[0:3]), tuple(records[3:6])]
    assert assembler.safe_offsets() == {(TOPIC, 0): 3, (TOPIC, 1): 3}  # records[6] pending
    assert assembler.metrics.delivered_records == 6


def test_batches_mode_short_batch_after_the_timeout_without_stale_records() -> None:
    assembler = GroupAssembler(
        TrainerSettings(mode="batches", batch_size=4, batch_timeout_s=2, max_staleness=1)
    )
    assembler.policy_version = 9
    old, new = scored("a", 0, versions=[5]), scored("a", 1, versions=[8])
    assembler.add((TOPIC, 0), 0, old, now=0.0)
    assembler.add((TOPIC, 0), 1, new, now=1.0)
    assembler.expire(1.9)
    assert assembler.pop() is None
    assembler.expire(2.0)
    batch = assembler.pop()
    assert isinstance(batch, RecordBatch) and batch.records == (new,)
    assert assembler.metrics.dropped_stale == 1
    assert assembler.safe_offsets() == {(TOPIC, 0): 2}


def test_the_position_names_finished_trajectories_past_the_safe_offset() -> None:
    assembler = GroupAssembler(TrainerSettings())
    pending = scored("p", 0, samples=2)
    done = group_of("d", 1)[0]
    assembler.add((TOPIC, 0), 0, pending, now=0.0)
    assembler.add((TOPIC, 0), 1, done, now=0.0)
    assert isinstance(assembler.pop(), Group)
    position = assembler.position()
    assert position.offsets == {(TOPIC, 0): 0}
    assert position.done == {done.trajectory.trajectory_id}
    assert position.finished_groups == [("task-d", "d")]
    assembler.add((TOPIC, 0), 2, scored("p", 1, samples=2), now=0.0)
    assert isinstance(assembler.pop(), Group)
    position = assembler.position()
    assert position.offsets == {(TOPIC, 0): 3} and position.done == set()  # all before 3
    assert position.finished_groups == [("task-d", "d"), ("task-p", "p")]
