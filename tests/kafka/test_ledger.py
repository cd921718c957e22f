"""The consumers' ledger: the safe offset of a partition and what finished past it."""

from __future__ import annotations

from rollstream.kafka.ledger import PartitionLedger


def test_the_safe_offset_is_the_oldest_held_record_else_the_next_to_read() -> None:
    ledger: PartitionLedger[str] = PartitionLedger()
    assert ledger.safe() is None  # nothing read, nothing committed: no offset to name
    for offset in range(5):
        ledger.read(offset)
    ledger.hold(1)
    ledger.hold(3)
    assert ledger.safe() == 1
    ledger.release(1)
    assert ledger.safe() == 3
    ledger.release(3)
    ledger.release(3)  # twice, or never held: nothing changes
    assert ledger.safe() == 5


def test_a_record_joined_from_parts_moves_reading_past_its_last_part() -> None:
    ledger: PartitionLedger[str] = PartitionLedger(10)
    ledger.read(10, end=14)  # parts at 10..13
    assert ledger.safe() == 14
    ledger.read(12)  # a re-read never moves it back
    assert ledger.safe() == 14


def test_keys_finished_are_kept_until_the_safe_offset_passes_them() -> None:
    ledger: PartitionLedger[str] = PartitionLedger(0)
    for offset in range(6):
        ledger.read(offset)
    ledger.hold(0)  # an open session from offset 0
    ledger.finish("b", 4)  # a session emitted, its last record at 4
    ledger.finish("c", 5)
    assert ledger.prune() == {"b": 4, "c": 5}  # a re-read from 0 must skip them
    ledger.release(0)
    ledger.finish("a", 3)
    assert ledger.safe() == 6
    assert ledger.prune() == {}  # all behind the commit: no re-read reaches them


def test_a_restart_starts_from_the_committed_offset_with_what_was_done_past_it() -> None:
    ledger = PartitionLedger(7, {"x": 9, "y": 6})
    assert ledger.safe() == 7
    assert ledger.prune() == {"x": 9}  # y is settled before 7
