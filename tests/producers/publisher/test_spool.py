"""The local spool: durable order, commits, segments, torn writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.producers.publisher.spool import Spool, SpoolError
from tests.producers.publisher.tiny_disk import fill, tiny_disk


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


def test_an_append_the_full_disk_refuses_is_cut_back(tmp_path: Path) -> None:
    """A real full disk (tmpfs): the refused append leaves no torn frame behind.

    The append fills the free end of the segment's last page before the disk refuses the rest;
    left there, that torn frame would hide every later record, and the next start's repair
    would cut them all off.
    """
    with tiny_disk(tmp_path / "disk", "256k") as disk:
        spool = Spool(disk / "spool")
        spool.append([(b"k", b"before")])
        filler = fill(disk)
        with pytest.raises(SpoolError, match="No space left") as info:
            spool.append([(b"k", b"x" * 8192)])
        assert info.value.retriable
        filler.unlink()  # space back
        spool.append([(b"k", b"after")])
        assert [r.value for r in spool.read()] == [b"before", b"after"]
        assert [r.value for r in Spool(disk / "spool").read()] == [b"before", b"after"]


def test_a_partial_write_then_a_refusal_is_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with a fake disk: it takes half of the append, then refuses the rest."""
    import errno
    import os

    spool = Spool(tmp_path)
    spool.append([(b"k", b"before")])
    real_write = os.write
    calls = []

    def half_then_full(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(data)[: len(data) // 2])

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(SpoolError):
        spool.append([(b"k", b"lost"), (b"k", b"too")])
    monkeypatch.setattr(os, "write", real_write)
    assert len(calls) == 2  # a partial write happened before the refusal
    spool.append([(b"k", b"after")])
    assert [r.value for r in Spool(tmp_path).read()] == [b"before", b"after"]


def test_a_sent_offset_the_disk_refuses_is_kept_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Committing on a full disk raises SpoolError, but nothing is read (sent) twice."""
    import errno
    import os

    spool = Spool(tmp_path)
    spool.append([(b"k", b"1"), (b"k", b"2"), (b"k", b"3")])
    first = spool.read(2)

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(SpoolError):
        spool.commit(first[-1])
    monkeypatch.undo()
    assert [r.value for r in spool.read()] == [b"3"]
    assert spool.pending_bytes == first[-1].segment.stat().st_size - first[-1].end


def test_damage_skips_only_the_damaged_frame_not_the_records_after_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([(b"k", b"first"), (b"k", b"second"), (None, b"third"), (b"k", b"fourth")])
    [segment] = tmp_path.glob("spool-*.log")
    data = bytearray(segment.read_bytes())
    frame = len(data) // 4 + 1  # inside the second frame (the four are about equal)
    data[frame + 9] ^= 0xFF  # a byte of its body: its CRC no longer matches
    segment.write_bytes(bytes(data))
    first = spool.read(1)
    assert [r.value for r in first] == [b"first"]
    spool.commit(first[0])
    assert [r.value for r in spool.read()] == [b"third", b"fourth"]
    assert 0 < spool.skipped_bytes < len(data) // 2


def test_damage_in_the_middle_is_skipped_with_a_count_not_a_stall(tmp_path: Path) -> None:
    """Bytes that are no frame where a frame should start: skipped and counted, reading goes on."""
    spool = Spool(tmp_path, segment_bytes=64)
    spool.append([(b"k", b"a" * 70)])  # fills the first segment
    spool.append([(b"k", b"b")])  # the second
    [first, _] = sorted(tmp_path.glob("spool-*.log"))
    data = bytearray(first.read_bytes())
    data[0] ^= 0xFF  # its only frame's header is damaged
    first.write_bytes(bytes(data))
    assert [r.value for r in spool.read()] == [b"b"]
    assert spool.skipped_bytes == len(data)


def _bytes_read() -> int:
    """Bytes this process has read through system calls so far (Linux /proc)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_read_takes_only_the_frames_it_returns_not_the_whole_segment(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    value = b"x" * 16_384
    spool.append([(b"k", value)] * 2_000)  # one segment of about 32 MiB
    drained = 0
    before = _bytes_read()
    for _ in range(10):  # a drain's steps from the middle of the segment on
        records = spool.read(5)
        drained += len(records)
        spool.commit(records[-1])
    read = _bytes_read() - before
    assert drained == 50 and spool.read(1)[0].value == value
    # 50 frames of 16 KiB, not ten reads of 32 MiB: a drain of a full segment stays linear.
    assert read < 4 * 1024 * 1024
