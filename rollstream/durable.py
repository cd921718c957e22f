"""Files that survive a crash or a power loss: appends, replacements, the directories naming them.

An fsync of a file makes its bytes durable, not its name: a new file, a rename or an unlink is
durable only once its directory is fsync'd too (without it a power loss can bring back a removed
segment or lose a created one the writer already counted on). Files here are private (0600):
they hold records and session ids, which are strict mode's credentials.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Mode of every file written here, and (with search) of the directories made for them.
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a write may take less than asked (a signal, a nearly full disk)
        view = view[os.write(fd, view) :]


def sync_directory(directory: Path) -> None:
    """Fsync ``directory``: the names created, renamed or removed in it become durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directory(directory: Path) -> None:
    """Make ``directory`` (and its parents) private, its name durable; nothing if it exists."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    sync_directory(directory.parent)


def append_durably(path: Path, data: bytes) -> int:
    """Append ``data`` to ``path`` (made private if new) and fsync; the offset it starts at.

    On failure the file is cut back to its size before the append (OSError either way): a
    partial write would otherwise leave a torn frame that hides every later one.
    """
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    try:
        before = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, before)  # freeing space: works on a full disk
            os.fsync(fd)
            raise
    finally:
        os.close(fd)
    if created:
        sync_directory(path.parent)
    return before


def replace_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` whole or not at all (a private file), durably."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    sync_directory(path.parent)


def remove_durably(*paths: Path) -> None:
    """Remove ``paths`` (missing ones are fine) in order, then make that durable."""
    for path in paths:
        path.unlink(missing_ok=True)
    for parent in dict.fromkeys(path.parent for path in paths):
        sync_directory(parent)
