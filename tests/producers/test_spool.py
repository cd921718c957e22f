"""The local spool: durable order, commits, segments, torn writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.producers.spool import Spool, SpoolError


def _drain(spool: Spool, batch: int = 3) -> list[tuple[bytes | None, bytes]]:
    out = []
    while records := spool.read(batch):
        out += [(r.key, r.value) for r in records]
        spool.commit(records[-1])
    return out


def test_records_come_back_in_order_across_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=64)
    records: list[tuple[bytes | None, bytes]] = [(b"k%d" % i, b"v" * i) for i in range(20)]
    records.append((None, b"keyless"))
    for i in range(0, len(records), 4):
        spool.append(records[i : i + 4])
    assert len(list(tmp_path.glob("spool-*.log"))) > 1
    assert not spool.empty()
    assert _drain(spool) == records
    assert spool.empty() and spool.pending_bytes == 0
    assert len(list(tmp_path.glob("spool-*.log"))) == 1  # sent segments are deleted


def test_commit_survives_a_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([(b"k", b"1"), (b"k", b"2"), (b"k", b"3")])
    first = spool.read(2)
    spool.commit(first[-1])
    again = Spool(tmp_path)  # a new process
    assert [r.value for r in again.read()] == [b"3"]


def test_uncommitted_records_are_read_again(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([(b"k", b"1"), (b"k", b"2")])
    assert [r.value for r in spool.read()] == [b"1", b"2"]
    assert [r.value for r in Spool(tmp_path).read()] == [b"1", b"2"]  # at least once


def test_a_torn_tail_is_cut_and_later_appends_are_readable(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([(b"k", b"whole")])
    [segment] = tmp_path.glob("spool-*.log")
    with segment.open("ab") as fh:
        fh.write(b"\x05\x00\x00\x00\x09\x00")  # a crash in the middle of a frame
    repaired = Spool(tmp_path)
    repaired.append([(b"k", b"after")])
    assert [r.value for r in repaired.read()] == [b"whole", b"after"]


def test_a_corrupt_frame_stops_reading_before_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([(b"k", b"good"), (b"k", b"bad!")])
    [segment] = tmp_path.glob("spool-*.log")
    data = bytearray(segment.read_bytes())
    data[-6] ^= 0xFF  # flip a byte of the second value
    segment.write_bytes(bytes(data))
    assert [r.value for r in Spool(tmp_path).read()] == [b"good"]


def test_a_full_disk_is_a_retriable_spool_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    spool = Spool(tmp_path)

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(SpoolError, match="No space left") as info:
        spool.append([(b"k", b"v")])
    assert info.value.retriable
