"""Durable, private files: the spool's and the session journal's names survive a power loss.

A power loss cannot be staged here; what makes a name durable can be watched: the directory
fsync'd after a file is created, renamed or removed in it. Modes are read from the disk.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollstream import durable
from rollstream.interceptor.registry import SessionRegistry
from rollstream.producers.publisher.spool import Spool


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every path fsync'd, in order (files and directories alike)."""
    paths: list[Path] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        paths.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield paths


def _modes(directory: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}


def test_a_new_segment_and_its_sent_offset_are_named_durably(
    tmp_path: Path, synced: list[Path]
) -> None:
    directory = tmp_path / "spool"
    spool = Spool(directory, segment_bytes=64, topic="t")
    assert directory in synced and tmp_path in synced  # its own name, and its meta file's
    synced.clear()
    spool.append([(b"k", b"x" * 80)])  # a new segment: its name, after its bytes
    first = directory / "spool-000000001.log"
    assert synced == [first, directory]
    synced.clear()
    spool.append([(b"k", b"y" * 80)])  # the first is full: a second segment
    assert synced == [directory / "spool-000000002.log", directory]
    synced.clear()
    spool.segment_bytes = 10_000
    spool.append([(None, b"z")])  # appended to an existing segment: its bytes only
    assert synced == [directory / "spool-000000002.log"]
    synced.clear()
    (record,) = spool.read(limit=1)
    spool.commit(record)  # the first segment sent whole: its offset, then both names removed
    assert synced[-1] == directory and synced.count(directory) == 2
    assert sorted(p.name for p in directory.glob("spool-*")) == [
        "spool-000000002.log"
    ]  # no offset file left beside the removed segment, no partial replacement either
    spool.close()


def test_the_spool_and_the_session_journal_are_private(tmp_path: Path) -> None:
    directory = tmp_path / "spool"
    spool = Spool(directory, segment_bytes=64, topic="t", lock_timeout_s=1)
    spool.append([(b"k", b"x" * 80)])
    spool.append([(b"k", b"x" * 80)])
    spool.commit(spool.read(limit=1)[0])
    spool.close()
    assert stat.S_IMODE(directory.stat().st_mode) == durable.PRIVATE_DIR
    modes = _modes(directory)
    assert {"lock", "meta.json", "spool-000000002.log"} <= set(modes)
    assert set(modes.values()) == {durable.PRIVATE_FILE}, modes

    journal = tmp_path / "state" / "sessions"
    registry = SessionRegistry(journal)
    registry.register("s-1", "exact")
    assert stat.S_IMODE(journal.stat().st_mode) == durable.PRIVATE_FILE
    os.chmod(journal, 0o644)  # as an earlier release left it
    assert "s-1" in SessionRegistry(journal)
    assert stat.S_IMODE(journal.stat().st_mode) == durable.PRIVATE_FILE
    assert _modes(journal.parent) == {"sessions": durable.PRIVATE_FILE}


def test_a_refused_replacement_leaves_the_old_file_and_no_partial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "offset.done"
    durable.replace_durably(target, b"10")

    def refuse(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        durable.replace_durably(target, b"20")
    assert target.read_bytes() == b"10"
    assert [p.name for p in tmp_path.iterdir()] == ["offset.done"]
