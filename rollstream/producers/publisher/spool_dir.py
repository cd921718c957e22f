"""A spool directory's lock (``lock``) and what it says about itself (``meta.json``).

The lock is an exclusive ``flock`` with the holder's pid written in for messages. It is held
as long as the descriptor stays open, by one open file at a time (two in one process exclude
each other too), and released by the kernel when its process dies, however it dies: a spool
nobody holds is an orphan. ``meta.json`` names the topic its records are for.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from pathlib import Path

from rollstream.durable import PRIVATE_FILE, replace_durably

log = logging.getLogger(__name__)

LOCK_FILE = "lock"
META_FILE = "meta.json"
POLL_S = 0.05


class LockHeld(Exception):
    """Another holder kept the lock for the whole wait."""

    def __init__(self, directory: Path, holder: str) -> None:
        super().__init__(f"the spool in {directory} is locked by pid {holder}")
        self.holder = holder


def lock(directory: Path, timeout: float) -> int:
    """A descriptor holding the directory's lock (the file and directory created if missing).

    Polls every ``POLL_S`` for up to ``timeout`` (0: one try), then raises LockHeld; OSError
    if the file cannot be opened or locked at all. The descriptor is close-on-exec: a child
    process must not keep a dead parent's spool locked.
    """
    deadline = time.monotonic() + timeout
    while True:
        fd = try_lock(directory)
        if fd is not None:
            with contextlib.suppress(OSError):  # only for messages: a full disk is no reason
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        if time.monotonic() >= deadline:
            raise LockHeld(directory, lock_holder(directory))
        time.sleep(POLL_S)


def try_lock(directory: Path) -> int | None:
    """A descriptor holding the directory's lock, or None while another holds it (no wait)."""
    path = directory / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
        except FileNotFoundError:
            # An adopter removed the emptied directory meanwhile: ours to create again.
            directory.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        # The holder we raced may have unlinked the file before letting go (an adopter that
        # emptied the directory): a lock on that inode guards nothing; take the new file's.
        if _same_file(fd, path):
            return fd
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    held = os.fstat(fd)
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def lock_holder(directory: Path) -> str:
    """The pid written in the directory's lock file (``?`` if there is none)."""
    try:
        return (directory / LOCK_FILE).read_text().strip() or "?"
    except OSError:
        return "?"


def read_topic(directory: Path) -> str | None:
    """The topic the spool's publisher recorded; None if none (or it cannot be read)."""
    try:
        topic = json.loads((directory / META_FILE).read_text())["topic"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return topic if isinstance(topic, str) else None


def write_topic(directory: Path, topic: str) -> None:
    """Record the topic (durably; a failure is only logged: the spool then is not adopted)."""
    if read_topic(directory) == topic:
        return
    try:
        replace_durably(directory / META_FILE, json.dumps({"topic": topic}).encode())
    except OSError as exc:
        log.warning("cannot record the topic of the spool in %s: %s", directory, exc)


def locked(directory: Path) -> bool:
    """Whether a holder has the directory's lock now (creates nothing, takes nothing)."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        # Shared: two probes at once do not take each other for a holder.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
