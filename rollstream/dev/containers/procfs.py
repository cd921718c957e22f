"""What /proc says about the daemon's processes and mounts, and undoing what a dead one left.

A pid file outlives its process: a daemon killed, or a machine restarted, leaves one naming a pid
that is gone or, after a restart, belongs to another program. A pid counts as the daemon only
while it is alive (not a zombie) and runs that program with this directory's own arguments.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from pathlib import Path

from rollstream.host import process_args

log = logging.getLogger(__name__)

_MNT_DETACH = 2


def cmdline(pid: int) -> list[bytes] | None:
    """The arguments of live process ``pid``; None if it is gone or a zombie."""
    return process_args(pid)


def runs(pid: int, program: str, marker: str) -> bool:
    """Whether ``pid`` is alive and runs ``program`` with ``marker`` among its arguments.

    A live pid alone proves nothing, pids are reused; nor does a command line naming the file
    (an editor, ``tail``): the program must be the one named, with this directory's argument.
    """
    args = cmdline(pid)
    if not args or not args[0]:
        return False
    name = os.path.basename(os.fsdecode(args[0]))
    return name == program and any(marker in os.fsdecode(a) for a in args[1:])


def read_pid(path: Path) -> int | None:
    """The pid written in ``path``; None if there is no such file or it holds no number."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def pids_running(program: str, marker: str) -> list[int]:
    """Every live process that runs ``program`` with ``marker`` among its arguments."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and runs(int(entry.name), program, marker):
            found.append(int(entry.name))
    return found


def wait_gone(pid: int, program: str, marker: str, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to stop being that process; whether it did."""
    deadline = time.monotonic() + timeout
    while runs(pid, program, marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def kill_all(program: str, marker: str, why: str) -> int:
    """SIGKILL every process running ``program`` with ``marker``; how many there were."""
    pids = pids_running(program, marker)
    for pid in pids:
        log.warning("killing %s %d left behind (%s)", program, pid, why)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        wait_gone(pid, program, marker, 5.0)
    return len(pids)


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root``, deepest first (the order to unmount them in)."""
    prefix = str(root.resolve())
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        # Field 5 is the mount point, with spaces and the like escaped as octal.
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def unmount_under(root: Path) -> list[Path]:
    """Detach every mount at or below ``root``; the mount points that would not go.

    A stopped daemon can leave its data root's bind mount and the network namespace of its
    host network mounted, and one that was killed also its containers' overlays: removing the
    directory then fails, or worse, descends into what is mounted there.
    """
    if not mounts_under(root):
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    for point in mounts_under(root):
        if libc.umount2(os.fsencode(point), _MNT_DETACH) != 0:
            log.warning("could not unmount %s: %s", point, os.strerror(ctypes.get_errno()))
    return mounts_under(root)
