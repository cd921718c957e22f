"""Reading what a session left behind (its output, its diff) without following its links.

A session's files are the policy's to replace: a symbolic or hard link put where the node reads
an output would put another file of this user's (a token, a key) into a record. Outputs are read
only from regular files of their own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from rollstream.errors import RollstreamError


class OutputError(RollstreamError):
    """An output file that is not read: a link, a special file, or unreadable."""


def open_output(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file of its own, else an OutputError.

    A missing file raises FileNotFoundError, as ``open`` does.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OutputError(f"{path.name} cannot be read: {exc.strerror}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise OutputError(f"{path.name} is not a file of its own (a link or a special file)")
    return os.fdopen(fd, "rb")


def read_tail(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """The last ``max_bytes`` of the output at ``path`` and its whole size (see open_output)."""
    with open_output(path) as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(size - max_bytes, 0))
        return f.read(), size


def read_head(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """The first ``max_bytes`` of the output at ``path`` and its whole size (see open_output)."""
    with open_output(path) as f:
        return f.read(max_bytes), os.fstat(f.fileno()).st_size
