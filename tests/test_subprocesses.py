"""``spawn``: a cancellation at any point of a child's start neither hangs nor leaves the child."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from rollstream import subprocesses
from rollstream.subprocesses import spawn


def _children(marker: str) -> list[int]:
    """Our child processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) == os.getpid() and marker in (entry / "cmdline").read_text():
                found.append(int(entry.name))
    return found


async def test_a_cancel_at_any_point_of_the_start_neither_hangs_nor_leaves_the_child() -> None:
    marker = "31.4159"
    async with asyncio.timeout(60):  # on the bare CPython call, some of these hang for good
        for ticks in range(40):
            starting = asyncio.create_task(
                spawn(
                    "sleep",
                    marker,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    start_new_session=ticks % 2 == 0,
                )
            )
            for _ in range(ticks):  # a cancellation at each step of the start
                await asyncio.sleep(0)
            starting.cancel()
            try:
                proc = await starting
            except asyncio.CancelledError:
                continue
            proc.kill()  # started before the cancel: ours to stop
            await proc.communicate()
        while subprocesses._REAPERS or _children(marker):  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # killed and reaped, zombies included
