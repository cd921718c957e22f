"""Records waiting for the broker, in order: in the spool, then behind it in memory.

Memory holds records only while the spool cannot be written (a full disk), up to a bound.
Records held in memory are moved to the spool, still in order, once the disk takes writes again
(tried at most once per retry interval: each try writes to a full disk), or sent straight from
memory if the broker comes back first. Beyond the bound they are dropped, with an error in the
log and the ``dropped`` counter.

Every operation touches the disk (fsync'd appends, offset commits, segment reads), so the
publisher runs them on a thread of their own (``DiskThread``), in the order it asks for them,
and never on the event loop that forwards the harness's streams.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rollstream.producers.publisher.metrics import PublisherMetrics
from rollstream.producers.publisher.spool import Spool, SpooledRecord, SpoolError

log = logging.getLogger(__name__)

Record = tuple[bytes | None, bytes]


@dataclass(frozen=True)
class Taken:
    """The oldest waiting records, still waiting until ``Backlog.commit``."""

    records: list[Record]
    spooled: list[SpooledRecord]  # where they are in the spool; empty when held in memory


class DiskThread:
    """One thread running disk work in the order it was submitted (the spool's single writer).

    ``inline`` runs the work at once on the caller's thread instead: after ``close()`` (a
    publisher stopped twice), and for ``bench outage`` (the way it was before, on the loop).
    """

    def __init__(self, inline: bool = False) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="capture-spool")
        self.inline = inline

    def submit[T](self, fn: Callable[..., T], *args: object) -> Future[T]:
        """Queue ``fn(*args)`` after everything submitted before; returns at once.

        A failure nobody awaits is logged: a lost exception would hide a lost record.
        """
        if self.inline:
            future: Future[T] = Future()
            try:
                future.set_result(fn(*args))
            except Exception as exc:
                future.set_exception(exc)
        else:
            future = self._executor.submit(fn, *args)
        future.add_done_callback(_log_failure)
        return future

    async def run[T](self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` after everything submitted before, awaited without blocking the loop."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def close(self) -> None:
        """Finish what was submitted and stop the thread."""
        self.inline = True
        self._executor.shutdown(wait=True)


def _log_failure(future: Future[Any]) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.error("spool operation failed", exc_info=exc)


class Backlog:
    """The spool and the records held in memory behind it, with the publisher's counters.

    Used from one thread at a time (the publisher's ``DiskThread``). The event loop only reads
    ``waiting``, ``added`` and ``held``, each written by that thread alone.
    """

    def __init__(
        self, spool: Spool, metrics: PublisherMetrics, memory_limit: int, retry_interval_s: float
    ) -> None:
        self.spool = spool
        self.metrics = metrics
        self.memory_limit = memory_limit
        self.retry_interval_s = retry_interval_s
        self._memory: list[Record] = []
        self._disk_retry_at = 0.0
        #: Records passed to ``add`` so far (spooled, held or dropped): the publisher counts
        #: what it submitted minus this as still on its way to the disk.
        self.added = 0
        #: Whether anything waits, as of the last operation (read without touching the disk).
        self.waiting = not self.empty()

    def empty(self) -> bool:
        """Whether nothing waits."""
        return not self._memory and self.spool.empty()

    @property
    def held(self) -> int:
        """Records held in memory."""
        return len(self._memory)

    def add(self, records: list[Record]) -> None:
        """Add records after every waiting one: to the spool, or to memory if it is unwritable."""
        if not records:
            return
        # ``waiting`` is set (by _update) before ``added`` counts the records: a reader never
        # sees them neither on their way nor waiting.
        self.flush()
        if self._memory or not self._disk_due():
            self._hold(records)
        else:
            try:
                self.spool.append(records)
            except SpoolError as exc:
                self._spool_failed(exc)
                self._hold(records)
            else:
                self.metrics.spooled += len(records)
                self._spool_ok()
        self.added += len(records)

    def flush(self, force: bool = False) -> None:
        """Move the records held in memory to the spool, if it takes them (``force``: try now)."""
        if not self._memory or not (force or self._disk_due()):
            return
        try:
            self.spool.append(self._memory)
        except SpoolError as exc:
            self._spool_failed(exc)
            return
        self.metrics.spooled += len(self._memory)
        self._memory = []
        self._spool_ok()

    def take(self, limit: int) -> Taken | None:
        """The oldest waiting records (at most ``limit``), left in place; None if none."""
        if not self.spool.empty():
            spooled = self.spool.read(limit)
            if self.spool.skipped_bytes:
                self.metrics.spool_errors += 1  # damage skipped (logged by the spool)
                self.spool.skipped_bytes = 0
            if spooled:
                return Taken([(r.key, r.value) for r in spooled], spooled)
            if not self.spool.empty():
                return None  # nothing readable now; the caller waits and tries again
        if self._memory:
            return Taken(self._memory[:limit], [])
        return None

    def commit(self, taken: Taken, count: int) -> None:
        """The first ``count`` records of ``taken`` are dealt with (sent or set aside)."""
        if count <= 0:
            return
        if taken.spooled:
            try:
                self.spool.commit(taken.spooled[count - 1])
            except SpoolError as exc:  # remembered in memory: not sent twice by this process
                self._spool_failed(exc)
            else:
                self._spool_ok()
        elif self._memory[:count] == taken.records[:count]:
            del self._memory[:count]
        else:
            # Moved from memory to the spool while they were being sent: they head it now.
            self.drop_copies(taken.records[:count])
        self._update()

    def drop_copies(self, records: list[Record]) -> None:
        """Drop ``records`` from the head: added while being sent, then acknowledged."""
        if not records:
            return
        head = self.take(len(records))
        if head is None or head.records != records:
            # Not where they should be: leave them; they are sent again (at least once).
            log.warning("spooled copies of an acknowledged batch not found; sent again")
            return
        self.commit(head, len(records))

    def drop_held(self) -> int:
        """Forget the records held in memory (the process stops); how many."""
        lost, self._memory = len(self._memory), []
        self._update()
        return lost

    def _disk_due(self) -> bool:
        return time.monotonic() >= self._disk_retry_at

    def _hold(self, records: list[Record]) -> None:
        room = max(self.memory_limit - len(self._memory), 0)
        self._memory += records[:room]
        lost = len(records) - room
        if lost > 0:
            self.metrics.dropped += lost
            log.error("spool unavailable and memory bound reached: %d records dropped", lost)
        self._update()

    def _spool_failed(self, exc: SpoolError) -> None:
        self.metrics.spool_errors += 1
        if not self.metrics.spool_alarm:
            log.error("spool alarm: %s; keeping records in memory", exc)
        self.metrics.spool_alarm = True
        self._disk_retry_at = time.monotonic() + self.retry_interval_s
        self._update()

    def _spool_ok(self) -> None:
        if self.metrics.spool_alarm and not self._memory:
            log.warning("spool writable again; alarm cleared")
            self.metrics.spool_alarm = False
        self._update()

    def refresh(self) -> None:
        """Read the spool's state again (records were added to it from outside: adoption)."""
        self._update()

    def _update(self) -> None:
        self.metrics.spool_bytes = self.spool.pending_bytes
        self.metrics.held = len(self._memory)
        self.waiting = bool(self._memory) or self.metrics.spool_bytes > 0
