"""Orphaned spools: the lock that tells them from live ones, and their adoption by a sibling.

A spool named after a port or a worker index is opened again by nobody once the port changes
or the pool shrinks; a sibling of the same family and topic adopts its records at its start.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rollstream.producers.publisher import adopt, spool_dir
from rollstream.producers.publisher.adopt import adopt_orphans
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings, Record
from rollstream.producers.publisher.rejected import RejectedRecords
from rollstream.producers.publisher.spool import Spool, SpoolError, SpoolLocked
from rollstream.settings import KafkaSettings
from tests.waiting import until


def _values(n: int, start: int = 0) -> list[bytes]:
    return [b"%d" % i for i in range(start, start + n)]


def _owned(directory: Path, topic: str = "t", **kwargs: object) -> Spool:
    """A spool opened the way a publisher opens its own."""
    return Spool(directory, topic=topic, lock_timeout_s=1, **kwargs)  # type: ignore[arg-type]


def _orphan(directory: Path, values: list[bytes], topic: str | None = "t") -> None:
    """A spool its publisher left with ``values`` unsent (small segments: several of them)."""
    with Spool(directory, segment_bytes=64, topic=topic, lock_timeout_s=1) as spool:
        for i in range(0, len(values), 4):
            spool.append([(b"k", v) for v in values[i : i + 4]])


def _drain(spool: Spool) -> list[bytes]:
    out = []
    while records := spool.read(7):
        out += [r.value for r in records]
        spool.commit(records[-1])
    return out


# -- the lock --------------------------------------------------------------------------------


_HOLDER = """
import sys
from pathlib import Path
from rollstream.producers.publisher.spool import Spool
spool = Spool(Path(sys.argv[1]), topic="t", lock_timeout_s=5)
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_spool_held_by_another_process_times_out_with_its_pid(tmp_path: Path) -> None:
    directory = tmp_path / "x-worker-0"
    command = [sys.executable, "-c", _HOLDER, str(directory)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
            began = time.monotonic()
            with pytest.raises(SpoolLocked) as info:
                Spool(directory, topic="t", lock_timeout_s=0.3)
            assert time.monotonic() - began >= 0.3  # it waited for the holder first
            assert isinstance(info.value, SpoolError) and not info.value.retriable
            message = str(info.value)
            assert str(directory) in message and f"pid {holder.pid}" in message
            assert "two publishers share a spool" in message
        finally:
            holder.kill()  # however its process ends, the kernel releases the lock
    _owned(directory).close()


def test_close_releases_the_lock_and_a_view_takes_none(tmp_path: Path) -> None:
    spool = _owned(tmp_path)
    with pytest.raises(SpoolLocked):
        Spool(tmp_path, lock_timeout_s=0)
    Spool(tmp_path).read()  # a view (tests, operators) does not wait for the owner
    spool.close()
    spool.close()  # twice is fine
    _owned(tmp_path).close()
    assert spool_dir.read_topic(tmp_path) == "t"


@pytest.mark.parametrize("removed", ["file", "directory"])
def test_a_lock_file_deleted_before_its_holder_let_go_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, removed: str
) -> None:
    """An adopter deletes an emptied spool's lock file (and directory), then lets go.

    A publisher that opened the file before and gets the lock on it then holds the lock of a
    file nobody else can open: it must take the new one's, or a third opener of the path would
    hold the lock too.
    """
    directory = tmp_path / "x-worker-0"
    adopter = spool_dir.lock(directory, 0)
    raced = False

    def adopter_finishes_first(fd: int, operation: int) -> None:
        nonlocal raced
        if not raced:  # between the publisher's open and its flock
            raced = True
            (directory / spool_dir.LOCK_FILE).unlink()
            if removed == "directory":
                directory.rmdir()
            os.close(adopter)
        fcntl.flock(fd, operation)

    patched = SimpleNamespace(
        flock=adopter_finishes_first,
        LOCK_EX=fcntl.LOCK_EX,
        LOCK_NB=fcntl.LOCK_NB,
        LOCK_SH=fcntl.LOCK_SH,
    )
    monkeypatch.setattr(spool_dir, "fcntl", patched)
    spool = _owned(directory)
    monkeypatch.undo()
    assert raced
    assert spool_dir.try_lock(directory) is None  # the only holder of the lock on the path
    assert spool_dir.lock_holder(directory) == str(os.getpid())
    spool.close()


# -- adoption --------------------------------------------------------------------------------


def test_an_orphan_of_our_topic_is_moved_in_order_and_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _orphan(tmp_path / "x-worker-3", _values(20))
    _orphan(tmp_path / "x-worker-1", _values(5, 100))
    ours = _owned(tmp_path / "x-worker-0")
    ours.append([(b"k", b"own")])  # what ours held already goes first
    with caplog.at_level(logging.INFO, logger=adopt.__name__):
        assert adopt_orphans(ours, "t", chunk=3, gap_s=0) == 25
    assert _drain(ours) == [b"own", *_values(5, 100), *_values(20)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x-worker-0"]
    adopted = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(adopted) == 2 and "adopted 20 records" in adopted[1]
    assert "x-worker-3" in adopted[1] and "removed" in adopted[1]


def test_live_siblings_other_families_and_empty_spools_are_left_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _orphan(tmp_path / "x-worker-1", _values(3))
    live = _owned(tmp_path / "x-worker-1")  # its publisher runs
    _orphan(tmp_path / "y-worker-1", _values(3))  # another family: not ours to look at
    _orphan(tmp_path / "x-worker-2", [])  # nothing waits there
    live_elsewhere = _owned(tmp_path / "x-worker-4", topic="other")
    live_elsewhere.append([(b"k", b"theirs")])
    ours = _owned(tmp_path / "x-worker-0")
    with caplog.at_level(logging.INFO):
        assert adopt_orphans(ours, "t", gap_s=0) == 0
    assert ours.empty() and caplog.records == []
    assert _drain(live) == _values(3)
    assert [r.value for r in Spool(tmp_path / "y-worker-1").read()] == _values(3)
    assert (tmp_path / "x-worker-2").exists()


def test_records_for_another_topic_or_none_recorded_are_left_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _orphan(tmp_path / "x-worker-1", _values(3), topic="other")
    _orphan(tmp_path / "x-worker-2", _values(2), topic=None)  # written before spools said
    ours = _owned(tmp_path / "x-worker-0")
    with caplog.at_level(logging.WARNING):
        assert adopt_orphans(ours, "t", gap_s=0) == 0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "x-worker-1" in warnings[0] and "topic other" in warnings[0]
    assert "x-worker-2" in warnings[1] and "no recorded topic" in warnings[1]
    assert [r.value for r in Spool(tmp_path / "x-worker-1").read()] == _values(3)
    assert [r.value for r in Spool(tmp_path / "x-worker-2").read()] == _values(2)


def test_rejected_records_keep_the_emptied_orphan_directory(tmp_path: Path) -> None:
    orphan = tmp_path / "x-worker-1"
    _orphan(orphan, _values(3))
    RejectedRecords(orphan).add("t", b"k", b"huge", "too large")
    ours = _owned(tmp_path / "x-worker-0")
    assert adopt_orphans(ours, "t", gap_s=0) == 3
    assert sorted(p.name for p in orphan.iterdir()) == ["lock", "rejected.jsonl", "rejected.log"]
    assert adopt_orphans(ours, "t", gap_s=0) == 0  # nothing waits there any more
    assert _drain(ours) == _values(3)


def test_an_owner_back_between_two_chunks_keeps_the_rest_each_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    orphan = tmp_path / "x-worker-3"
    _orphan(orphan, _values(10))
    owner: list[Spool] = []

    def owner_starts_again(seconds: float) -> None:  # in the pause between two chunks
        if not owner:
            owner.append(_owned(orphan))

    monkeypatch.setattr(adopt, "time", SimpleNamespace(sleep=owner_starts_again))
    ours = _owned(tmp_path / "x-worker-0")
    with caplog.at_level(logging.INFO, logger=adopt.__name__):
        assert adopt_orphans(ours, "t", chunk=3) == 3
    assert _drain(ours) == _values(3)
    assert _drain(owner[0]) == _values(7, 3)  # the rest, and only the rest
    assert "its lock was taken" in caplog.records[0].getMessage()


def test_an_owner_starting_during_an_adoption_waits_for_one_chunk_at_most(
    tmp_path: Path,
) -> None:
    """Real time, real pauses: the adopter leaves the lock free long enough between chunks."""
    orphan = tmp_path / "x-worker-3"
    _orphan(orphan, _values(400))
    ours = _owned(tmp_path / "x-worker-0")
    moved: list[int] = []
    adopter = threading.Thread(target=lambda: moved.append(adopt_orphans(ours, "t", chunk=4)))
    adopter.start()
    try:
        deadline = time.monotonic() + 10
        while ours.empty() and time.monotonic() < deadline:
            time.sleep(0.005)
        began = time.monotonic()
        owner = Spool(orphan, topic="t", lock_timeout_s=10)  # a hundred chunks: ten seconds
        waited = time.monotonic() - began
    finally:
        adopter.join(20)
    assert waited < 1.0, waited
    taken, kept = _drain(ours), _drain(owner)
    assert moved == [len(taken)] and 0 < len(taken) < 400
    assert taken + kept == _values(400)


def test_our_spool_refusing_records_stops_adoption_and_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _orphan(tmp_path / "x-worker-1", _values(3))
    _orphan(tmp_path / "x-worker-2", _values(3, 3))
    ours = _owned(tmp_path / "x-worker-0")

    def full(records: list[Record]) -> None:
        raise SpoolError("cannot write to the spool: No space left on device")

    ours.append = full  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        assert adopt_orphans(ours, "t", gap_s=0) == 0
    assert len(caplog.records) == 1 and "No space left" in caplog.records[0].getMessage()
    assert [r.value for r in Spool(tmp_path / "x-worker-1").read()] == _values(3)
    assert [r.value for r in Spool(tmp_path / "x-worker-2").read()] == _values(3, 3)


# -- the publisher ---------------------------------------------------------------------------


class Sink(CapturePublisher):
    """A publisher whose sends succeed into ``sent`` while ``up``, and fail while not."""

    def __init__(self, spool_dir: Path, up: bool = True) -> None:
        settings = PublisherSettings(linger_ms=0, retry_interval_s=0.02)
        super().__init__(KafkaSettings(), settings, "t", spool_dir)
        self.up = up
        self.sent: list[bytes] = []

    async def _send(self, batch: list[Record]) -> tuple[int, int]:
        if not self.up:
            return 0, 0
        self.sent += [value for _, value in batch]
        return len(batch), len(batch)


async def test_a_worker_gone_with_a_shrunk_pool_has_its_records_delivered(tmp_path: Path) -> None:
    """Pool of four, broker away: worker 3 spools and stops. The pool comes back with one."""
    gone = Sink(tmp_path / "x-worker-3", up=False)
    async with gone:
        for value in _values(5):
            gone.publish(b"k", value)
    assert [r.value for r in Spool(tmp_path / "x-worker-3").read()] == _values(5)
    _orphan(tmp_path / "x-worker-0", [b"own"])  # left by worker 0's previous run
    survivor = Sink(tmp_path / "x-worker-0")
    survivor.publish(b"k", b"new")  # queued before the start: after the spooled ones
    async with survivor:
        await until(lambda: len(survivor.sent) == 7, 10, "the orphan's records were sent")
    assert survivor.sent == [b"own", *_values(5), b"new"]
    assert survivor.metrics.adopted == 5 and survivor.metrics.drained == 7
    assert not (tmp_path / "x-worker-3").exists()


async def test_a_stopped_publisher_leaves_its_spool_to_the_next_at_once(tmp_path: Path) -> None:
    first = Sink(tmp_path / "x-worker-0", up=False)
    async with first:
        first.publish(b"k", b"0")
    began = time.monotonic()
    second = Sink(tmp_path / "x-worker-0")
    assert time.monotonic() - began < 1.0
    async with second:
        await until(lambda: second.sent == [b"0"], 10)
