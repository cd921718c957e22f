"""A task partition's progress: the commit point and the samples done past it, across owners."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from rollstream.producers.node.progress import (
    METADATA_BUDGET,
    WHOLE,
    PartitionProgress,
    decode,
    encode,
)


def test_the_commit_stops_at_the_first_record_with_a_sample_left() -> None:
    progress = PartitionProgress(10)
    first, second, third = progress.take(10, 2), progress.take(11, 3), progress.take(13, 1)
    first.done.add(1)
    second.done |= {0, 1, 2}
    third.done.add(0)
    point = progress.point()
    assert point is not None and point.offset == 10
    # 11 and 13 are whole but not consecutive: a record at 12 could be one not done.
    assert decode(point.offset, point.metadata) == {10: frozenset({1}), 11: WHOLE, 13: WHOLE}
    first.done.add(0)
    point = progress.point()
    assert point is not None and point.offset == 14 and point.metadata == ""


def test_whole_records_at_consecutive_offsets_are_one_range() -> None:
    point = encode(100, [(101, None), (102, None), (103, None), (105, frozenset({0, 4}))], 4000)
    assert point.metadata == "rs1 1-3,5:11"
    assert decode(100, point.metadata) == {
        101: WHOLE,
        102: WHOLE,
        103: WHOLE,
        105: frozenset({0, 4}),
    }


def test_past_the_budget_the_highest_offsets_are_left_out_and_counted() -> None:
    done = [(o, frozenset({0})) for o in range(1, 2000, 2)]
    point = encode(0, done, METADATA_BUDGET)
    assert len(point.metadata) <= METADATA_BUDGET and point.left_out > 0
    kept = decode(0, point.metadata)
    assert len(kept) + point.left_out == len(done)
    assert max(kept) < min(o for o, _ in done[len(kept) :])


def test_progress_inherited_past_what_was_read_is_committed_again_as_it_was() -> None:
    # An earlier owner finished 5 and 7 but not 6; this one reads only 4 (its queue is full).
    progress = PartitionProgress(4, encode(4, [(5, None), (7, None)], 4000).metadata)
    progress.take(4, 1).done.add(0)
    point = progress.point()
    assert point is not None and point.offset == 5
    assert decode(point.offset, point.metadata) == {5: WHOLE, 7: WHOLE}  # 6 still to run


def test_metadata_of_another_form_is_ignored() -> None:
    assert decode(5, "written by someone else") == {}
    assert decode(5, "rs1 x:zz") == {}


def test_a_record_delivered_again_is_seen_and_inherited_samples_fill_a_new_entry() -> None:
    progress = PartitionProgress(3, "rs1 0:2,1")
    entry = progress.take(3, 2)
    assert entry.todo() == [0] and progress.seen(3) and not progress.seen(4)
    assert progress.take(4, 5).finished  # whole, whatever its sample count


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(st.integers(1, 5), min_size=1, max_size=25),
    gaps=st.lists(st.booleans(), min_size=25, max_size=25),
    moves=st.lists(
        st.tuples(st.integers(1, 40), st.integers(0, 3), st.integers(1, 25)), max_size=6
    ),
    seed=st.integers(0, 2**32),
)
def test_across_owners_no_sample_is_lost_and_only_uncommitted_ones_run_twice(
    records: list[int], gaps: list[bool], moves: list[tuple[int, int, int]], seed: int
) -> None:
    """Owners read some records from the committed offset (``reads``: the intake's bound),
    finish samples in any order and commit after each; then the partition moves. A clean
    move commits everything first; a crash loses the commits of the owner's last ``lost``."""
    rng = random.Random(seed)
    offsets, at = [], 0
    for i, _ in enumerate(records):
        at += 2 if gaps[i] else 1  # a gap: a transaction marker, a record no longer there
        offsets.append(at)
    samples = dict(zip(offsets, records, strict=True))
    completed: list[tuple[int, int]] = []
    uncommitted: set[tuple[int, int]] = set()  # finished by an owner that crashed before
    committed: tuple[int, str] | None = None
    for steps, lost, reads in [*moves, (10_000, 0, 10_000)]:  # the last runs to the end
        progress = PartitionProgress(*committed) if committed else PartitionProgress()
        start = committed[0] if committed else 0
        running: list[tuple[int, int, set[int]]] = []
        for offset in [o for o in offsets if o >= start][:reads]:
            entry = progress.take(offset, samples[offset])
            running += [(offset, s, entry.done) for s in entry.todo()]
        rng.shuffle(running)
        ran = running[:steps]
        for n, (offset, sample, done) in enumerate(ran):
            completed.append((offset, sample))
            done.add(sample)
            if n >= len(ran) - lost:
                uncommitted.add((offset, sample))  # the owner crashes before this commit
                continue
            point = progress.point()
            assert point is not None
            unfinished = [e.offset for e in progress.entries if not e.finished]
            assert not unfinished or point.offset <= min(unfinished)
            committed = (point.offset, point.metadata)
    expected = sorted((o, s) for o, n in samples.items() for s in range(n))
    assert sorted(set(completed)) == expected  # none lost
    twice = {c for c in completed if completed.count(c) > 1}
    assert twice <= uncommitted  # only a crash runs a sample again
