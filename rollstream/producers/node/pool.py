"""The node's stages, each with its own worker pool, and init running ahead of run.

Sessions flow ``intake → init → ready → run → post (+ teardown)``. ``max_init``, ``max_run`` and
``max_post`` workers serve the stages. Pre-warming: a session holds a *slot* from the start of
its init to the end of its run, and there are ``max_run + prewarm`` slots, so init keeps up to
``prewarm`` sessions ready beyond the ones running: a run worker that frees up finds a ready
session instead of waiting for an init, and no more than ``prewarm`` runtimes sit idle.

Cancelling a task takes its sessions out of the queues and cancels the init or run in progress
(the runner kills the harness's process group); each of them still goes through post-run and
ends ``cancelled`` with a SessionEnded.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Coroutine, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rollstream.producers.node.session import Session, SessionRunner, Stage
from rollstream.producers.node.settings import NodeSettings
from rollstream.schemas.sessions import SessionStatus
from rollstream.schemas.tasks import Task

log = logging.getLogger(__name__)
_SPANS_KEPT = 10_000


@dataclass(frozen=True)
class StageSpan:
    """One session's time in one stage (``time.monotonic`` seconds)."""

    stage: str
    session_id: str
    start: float
    end: float


class StageMeter:
    """How many sessions are in each stage now, the most there ever were, and recent spans."""

    def __init__(self) -> None:
        self.current: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.spans: deque[StageSpan] = deque(maxlen=_SPANS_KEPT)

    def enter(self, stage: str) -> None:
        """A session entered ``stage``."""
        self.current[stage] += 1
        self.peak[stage] = max(self.peak[stage], self.current[stage])

    def leave(self, stage: str) -> None:
        """A session left ``stage``."""
        self.current[stage] -= 1

    @contextmanager
    def measure(self, stage: str, session_id: str) -> Iterator[None]:
        """Count a session in ``stage`` for the duration of the block, and note its span."""
        self.enter(stage)
        start = time.monotonic()
        try:
            yield
        finally:
            self.leave(stage)
            self.spans.append(StageSpan(stage, session_id, start, time.monotonic()))


class _SessionQueue:
    """Sessions by task priority (higher first), then first come, first served."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Session]] = []
        self._seq = itertools.count()
        self._nonempty = asyncio.Event()

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, session: Session) -> None:
        heapq.heappush(self._heap, (-session.task.priority, next(self._seq), session))
        self._nonempty.set()

    async def get(self) -> Session:
        while not self._heap:
            self._nonempty.clear()
            await self._nonempty.wait()
        # Popped in the same step as the caller resumes: a session is always either here or
        # held by a worker, never in between, so ``remove`` cannot miss it.
        return heapq.heappop(self._heap)[2]

    def remove(self, task_id: str) -> list[Session]:
        """Take out and return the sessions of ``task_id``."""
        taken = [s for _, _, s in self._heap if s.task.task_id == task_id]
        if taken:
            self._heap = [e for e in self._heap if e[2].task.task_id != task_id]
            heapq.heapify(self._heap)
        return taken


class NodeScheduler:
    """Runs sessions through init, run and post with bounded pools and pre-warming."""

    def __init__(self, runner: SessionRunner, settings: NodeSettings | None = None) -> None:
        self.runner = runner
        self.settings = settings or runner.settings
        self.meter = StageMeter()
        self._intake = _SessionQueue()
        self._ready = _SessionQueue()
        self._post = _SessionQueue()
        self._slots = asyncio.Semaphore(self.settings.max_run + self.settings.prewarm)
        self._active: dict[str, asyncio.Task[Any]] = {}  # session id -> its init or run
        self._tasks: dict[str, list[Session]] = {}
        self._done: dict[str, asyncio.Future[None]] = {}
        self._workers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the worker pools."""
        s = self.settings
        for name, count, loop in (
            ("init", s.max_init, self._init_worker),
            ("run", s.max_run, self._run_worker),
            ("post", s.max_post, self._post_worker),
        ):
            self._workers += [
                asyncio.create_task(loop(), name=f"node-{name}-{i}") for i in range(count)
            ]

    async def close(self, drain: bool = False) -> None:
        """Stop: let every session finish (``drain``) or cancel them all, then the workers."""
        if not drain:
            for task_id in list(self._tasks):
                self.cancel(task_id)
        if self._workers:
            await self.join()
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers.clear()

    async def __aenter__(self) -> NodeScheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def submit(self, task: Task, samples: Iterable[int] | None = None) -> list[Session]:
        """Queue ``samples`` of ``task`` (default: all); the new sessions, ids assigned."""
        loop = asyncio.get_running_loop()
        chosen = range(task.samples) if samples is None else samples
        sessions = [self.runner.new(task, i) for i in chosen]
        self._tasks.setdefault(task.task_id, []).extend(sessions)
        for session in sessions:
            self._done[session.session_id] = loop.create_future()
            self._intake.put(session)
        return sessions

    def cancel(self, task_id: str) -> int:
        """Cancel the task's sessions not yet in post-run; how many were cancelled."""
        queued = self._intake.remove(task_id)
        ready = self._ready.remove(task_id)
        for _ in ready:
            self.meter.leave("ready")
            self._slots.release()
        for session in (*queued, *ready):
            session.cancel()
            self._to_post(session)
        # What is left before post-run is in init or run. A stage that finished in this very
        # loop step, its worker not yet resumed, is still counted cancelled: cancel wins ties.
        running = [
            s
            for s in self._tasks.get(task_id, [])
            if s.stage not in (Stage.POST, Stage.ENDED) and s.status is None
        ]
        for session in running:
            session.cancel()
            child = self._active.get(session.session_id)
            if child is not None:
                child.cancel()  # the runner's process group dies with it
        return len(queued) + len(ready) + len(running)

    def sessions(self, task_id: str) -> list[Session]:
        """The sessions of ``task_id`` submitted here, in any stage."""
        return list(self._tasks.get(task_id, []))

    def forget(self, task_id: str) -> None:
        """Drop a finished task's sessions from memory."""
        for session in self._tasks.pop(task_id, []):
            self._done.pop(session.session_id, None)

    async def join(self, task_id: str | None = None) -> list[Session]:
        """Wait until every session (of ``task_id``, or all) has ended; those sessions."""
        ids = [task_id] if task_id is not None else list(self._tasks)
        sessions = [s for t in ids for s in self._tasks.get(t, [])]
        await asyncio.gather(*(self._done[s.session_id] for s in sessions))
        return sessions

    @property
    def concurrency(self) -> dict[str, int]:
        """The most sessions ever at once in each stage (init, ready, run, post).

        ``ready`` counts the ready queue, including a session a run worker is about to take;
        ``prewarm`` bounds those waiting for a run slot.
        """
        return {stage: self.meter.peak[stage] for stage in ("init", "ready", "run", "post")}

    async def _stage(self, session: Session, stage: str, work: Coroutine[Any, Any, Any]) -> Any:
        """Run one stage of ``session`` as a task ``cancel`` can reach; its result or None."""
        child = asyncio.create_task(work, name=f"{stage}:{session.session_id}")
        self._active[session.session_id] = child
        with self.meter.measure(stage, session.session_id):
            try:
                return await child
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the worker itself is being stopped, not just this session
                session.cancel()
                return None
            except Exception as exc:
                # A bug or a failing emit: the session still ends, with the reason.
                log.exception("session %s: %s crashed", session.session_id, stage)
                session.fail(SessionStatus.FAILED, f"{stage} crashed: {exc}")
                return None
            finally:
                self._active.pop(session.session_id, None)

    async def _init_worker(self) -> None:
        while True:
            # The slot first: a session is only taken off the intake when it may be prepared.
            await self._slots.acquire()
            try:
                session = await self._intake.get()
            except BaseException:
                self._slots.release()
                raise
            ready = session.status is None and bool(
                await self._stage(session, "init", self.runner.init(session))
            )
            if ready and session.status is None:
                self.meter.enter("ready")
                self._ready.put(session)
            else:
                self._slots.release()
                self._to_post(session)

    async def _run_worker(self) -> None:
        while True:
            session = await self._ready.get()
            self.meter.leave("ready")
            try:
                if session.status is None:
                    await self._stage(session, "run", self.runner.run(session))
            finally:
                self._slots.release()
            self._to_post(session)

    def _to_post(self, session: Session) -> None:
        # Marked at once: a session waiting for post-run has an outcome a cancel must not change.
        session.stage = Stage.POST
        self._post.put(session)

    async def _post_worker(self) -> None:
        while True:
            session = await self._post.get()
            with self.meter.measure("post", session.session_id):
                try:
                    await self.runner.post(session)
                except Exception:
                    log.exception("session %s: post-run failed", session.session_id)
                finally:
                    # Shielded: a stopping worker must not leave a sandbox behind.
                    await asyncio.shield(self.runner.teardown(session))
            done = self._done.get(session.session_id)
            if done is not None and not done.done():
                done.set_result(None)
