"""Child processes started from the event loop, safe to cancel while they start.

CPython 3.12 hangs for good when a cancellation lands while ``create_subprocess_exec`` connects
the child's pipes (python/cpython#103847 and #125502): the transport then never reports the
exit, and every later ``wait()`` on it parks forever. A node cancels sessions (and their git
and harness processes) at any moment, so the creation runs to its end in a task of its own here;
a cancellation meanwhile is raised at once, and the process it made is killed and reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

log = logging.getLogger(__name__)

#: Waits on processes whose starter was cancelled: held here so they are not collected.
_REAPERS: set[asyncio.Task[int]] = set()


async def spawn(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec(*argv, **kwargs)``, whose creation a cancel cannot cut."""
    creating = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, **kwargs))
    try:
        return await asyncio.shield(creating)
    except asyncio.CancelledError:
        group = bool(kwargs.get("start_new_session"))
        creating.add_done_callback(lambda task: _kill_created(task, group))
        raise


def _kill_created(task: asyncio.Future[asyncio.subprocess.Process], group: bool) -> None:
    if task.cancelled() or task.exception() is not None:
        return
    proc = task.result()
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: its children too
        else:
            proc.kill()
    reaper = asyncio.ensure_future(proc.wait())
    _REAPERS.add(reaper)
    reaper.add_done_callback(_REAPERS.discard)
    log.debug("killed process %d: its starter was cancelled", proc.pid)
