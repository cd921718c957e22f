"""Records carried as parts: split by the writer, joined in offset order by the reader."""

from __future__ import annotations

import os

import pytest
from aiokafka import ConsumerRebalanceListener
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.kafka import parts
from rollstream.kafka.clients import Consumer
from rollstream.kafka.parts import JoinedRecord, Joiner, after, split

TP = TopicPartition("t", 0)
BUDGET = 1024 * 64


def _record(offset: int, value: bytes, headers: parts.Headers = ()) -> ConsumerRecord:
    return ConsumerRecord("t", 0, offset, 0, 0, b"k", value, None, 1, len(value), list(headers))


def _parts(value: bytes, first: int, step: int = 1) -> list[ConsumerRecord]:
    return [
        _record(first + i * step, chunk, headers)
        for i, (chunk, headers) in enumerate(split(b"k", value, BUDGET))
    ]


def test_a_value_within_the_budget_is_one_record_without_headers() -> None:
    assert split(b"k", b"v" * 100, BUDGET) == [(b"v" * 100, ())]


def test_parts_join_into_the_value_at_the_first_offset_ending_past_the_last() -> None:
    value = os.urandom(3 * BUDGET)
    records = _parts(value, 10)
    assert len(records) == 4
    assert all(len(r.value) + 1 <= BUDGET for r in records)
    [joined] = Joiner().join({TP: records})[TP]
    assert isinstance(joined, JoinedRecord) and joined.value == value
    assert (joined.offset, after(joined), joined.key) == (10, 14, b"k")


def test_records_behind_a_whole_in_parts_wait_for_it_and_keep_offset_order() -> None:
    """Another writer's transaction interleaves with the parts' (10, 12, 14)."""
    value = os.urandom(2 * BUDGET)
    a0, a1, a2 = _parts(value, 10, step=2)
    b, c = _record(11, b"b"), _record(13, b"c")
    joiner = Joiner()
    assert joiner.join({TP: [a0, b, a1]}) == {}  # b waits behind the whole
    released = joiner.join({TP: [c, a2]})[TP]
    assert [r.value for r in released] == [value, b"b", b"c"]
    assert max(after(r) for r in released) == 15  # where a commit may go


def test_two_wholes_interleaved_are_told_apart() -> None:
    one, two = os.urandom(2 * BUDGET), os.urandom(2 * BUDGET)
    p, q = _parts(one, 0, step=2), _parts(two, 1, step=2)
    mixed = sorted([*p, *q], key=lambda r: r.offset)
    released = Joiner().join({TP: mixed})[TP]
    assert [r.value for r in released] == [one, two]


def test_a_part_of_a_whole_begun_before_the_reading_is_left_out() -> None:
    """A restart at a record after a whole's first part (the whole was handled before)."""
    late = _parts(os.urandom(2 * BUDGET), 10, step=2)[1:]
    joiner = Joiner()
    released = joiner.join({TP: [_record(11, b"b"), *late, _record(15, b"c")]})[TP]
    assert [r.value for r in released] == [b"b", b"c"]
    assert joiner.metrics.leftover_parts == len(late)


def test_reading_again_from_before_a_whole_starts_it_over() -> None:
    value = os.urandom(2 * BUDGET)
    records = _parts(value, 5)
    joiner = Joiner()
    assert joiner.join({TP: records[:2]}) == {}
    # Sought back to 5 (a rebalance voided the batch): the parts come again from the first.
    [joined] = joiner.join({TP: records})[TP]
    assert joined.value == value and joiner.metrics.leftover_parts == 0


def test_a_whole_whose_parts_never_all_come_is_released_raw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parts, "MAX_BEHIND", 3)
    first = _parts(os.urandom(2 * BUDGET), 0)[0]
    joiner = Joiner()
    records = [first, *(_record(i, b"x%d" % i) for i in range(1, 6))]
    released = joiner.join({TP: records})[TP]
    assert released[0] is first  # raw: it fails decoding downstream like any malformed record
    assert [r.value for r in released[1:]] == [b"x1", b"x2", b"x3", b"x4", b"x5"]
    assert joiner.metrics.broken_wholes == 1


def test_parts_that_do_not_join_to_their_digest_are_released_raw() -> None:
    records = _parts(os.urandom(2 * BUDGET), 0)
    records[1] = _record(1, os.urandom(len(records[1].value)), records[1].headers)
    joiner = Joiner()
    released = joiner.join({TP: records})[TP]
    assert released == records and joiner.metrics.broken_wholes == 1


async def test_a_revoked_partition_drops_what_waits_for_parts_before_the_callers_listener() -> None:
    """The next owner reads it again from the committed offset; nothing stays held here."""
    consumer = Consumer(bootstrap_servers="127.0.0.1:1")
    seen: list[list[TopicPartition]] = []

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            seen.append(list(revoked))

        def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
            seen.append(list(assigned))

    consumer.subscribe(["t"], listener=Listener())
    first = _parts(os.urandom(2 * BUDGET), 0)[0]
    assert consumer.joiner.join({TP: [first, _record(1, b"b")]}) == {}  # b waits behind it
    wrapped = consumer._subscription.listener
    await wrapped.on_partitions_revoked([TP])
    await wrapped.on_partitions_assigned([TP])
    assert seen == [[TP], [TP]]
    # Nothing held from before: a record comes out at once, not behind the part.
    assert consumer.joiner.join({TP: [_record(5, b"c")]})[TP][0].value == b"c"
    await consumer.stop()
