"""The node's stages, each with its own worker pool, and init running ahead of run.

Sessions flow ``intake → init → ready → run → post (+ teardown)``. ``max_init``, ``max_run`` and
``max_post`` workers serve the stages. Pre-warming: a session holds a *slot* from the start of
its init to the end of its run, and there are ``max_run + prewarm`` slots, so init keeps up to
``prewarm`` sessions ready beyond the ones running: a run worker that frees up finds a ready
session instead of waiting for an init, and no more than ``prewarm`` runtimes sit idle.

Cancelling a task takes its sessions out of the queues and cancels the init or run in progress
(the runner kills the harness's process group); each of them still goes through post-run and
ends ``cancelled`` with a SessionEnded. Withdrawing sessions (a node giving up their task's
partition) takes back those whose harness has not started: no records, sandbox removed, and
their samples are left to whichever node takes the partition.

An ended session is forgotten at once: ``on_ended`` is told, and a summary of it stays in
``finished`` (bounded) for the API.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rollstream.producers.node.history import FinishedSessions, SessionSummary
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

    def remove(self, chosen: Callable[[Session], bool]) -> list[Session]:
        """Take out and return the sessions ``chosen`` picks."""
        taken = [s for _, _, s in self._heap if chosen(s)]
        if taken:
            self._heap = [e for e in self._heap if not chosen(e[2])]
            heapq.heapify(self._heap)
        return taken


class NodeScheduler:
    """Runs sessions through init, run and post with bounded pools and pre-warming."""

    def __init__(
        self,
        runner: SessionRunner,
        settings: NodeSettings | None = None,
        on_ended: Callable[[Session], None] | None = None,
    ) -> None:
        self.runner = runner
        self.settings = settings or runner.settings
        #: Told of every session once it is over (ended, or withdrawn), after its teardown.
        self.on_ended = on_ended
        self.finished = FinishedSessions(self.settings.finished_sessions_kept)
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
        return len(self._cancel(self._tasks.get(task_id, []), "task cancelled"))

    def hand_back(self, sessions: Collection[Session], reason: str) -> list[Session]:
        """Cancel ``sessions`` (those not yet in post-run) so that they run again elsewhere.

        Each ends ``cancelled`` with ``reason`` and ``handed_back`` set; the ones cancelled.
        """
        cancelled = self._cancel(sessions, reason)
        for session in cancelled:
            session.handed_back = True
        return cancelled

    def _cancel(self, sessions: Collection[Session], reason: str) -> list[Session]:
        ids = {s.session_id for s in sessions}
        queued = self._intake.remove(lambda s: s.session_id in ids)
        ready = self._ready.remove(lambda s: s.session_id in ids)
        for _ in ready:
            self.meter.leave("ready")
            self._slots.release()
        for session in (*queued, *ready):
            session.cancel(reason)
            self._to_post(session)
        # What is left before post-run is in init or run. A stage that finished in this very
        # loop step, its worker not yet resumed, is still counted cancelled: cancel wins ties.
        running = [
            s for s in sessions if s.stage not in (Stage.POST, Stage.ENDED) and s.status is None
        ]
        for session in running:
            session.cancel(reason)
            child = self._active.get(session.session_id)
            if child is not None:
                child.cancel()  # the runner's process group dies with it
        return [*queued, *ready, *running]

    def withdraw(self, sessions: Collection[Session]) -> list[Session]:
        """Take back the sessions of ``sessions`` whose harness has not started; those.

        Queued ones leave the queue, ready ones give back their run slot, one in init has its
        init cancelled: none of them emits a record, the sandboxes made are removed, and each
        is then over (``on_ended`` sees it ``withdrawn``). Running sessions are not touched.
        """
        taken = [
            s
            for s in sessions
            if s.status is None and s.stage in (Stage.QUEUED, Stage.INIT, Stage.READY)
        ]
        ids = {s.session_id for s in taken}
        queued = self._intake.remove(lambda s: s.session_id in ids)
        ready = self._ready.remove(lambda s: s.session_id in ids)
        for _ in ready:
            self.meter.leave("ready")
            self._slots.release()
        for session in taken:
            session.withdrawn = True
            # Decided now: an init that finished this very step must not queue it for a run.
            session.cancel("withdrawn before its harness started")
        for session in queued:
            session.stage = Stage.ENDED  # nothing was made for it
            self._over(session)
        for session in ready:
            self._to_post(session)  # its sandbox is removed there, nothing emitted
        for session in taken:
            child = self._active.get(session.session_id)
            if child is not None:
                child.cancel()  # in init: it goes to post-run, where only teardown happens
        return taken

    @property
    def queued(self) -> int:
        """Sessions waiting for an init slot."""
        return len(self._intake)

    @property
    def held(self) -> int:
        """Sessions submitted here and not over yet."""
        return len(self._done)

    def sessions(self, task_id: str) -> list[Session]:
        """The sessions of ``task_id`` on this node that are not over yet, in any stage."""
        return list(self._tasks.get(task_id, []))

    def summaries(self, task_id: str) -> list[SessionSummary]:
        """What the node knows of ``task_id``'s sessions: those ended (kept), then the others."""
        live = [SessionSummary.of(s) for s in self._tasks.get(task_id, [])]
        return self.finished.of(task_id) + live

    async def wait(self, sessions: Iterable[Session], timeout: float | None = None) -> bool:
        """Wait until ``sessions`` are over, at most ``timeout`` seconds; whether they are."""
        futures = [f for s in sessions if (f := self._done.get(s.session_id)) is not None]
        if not futures:
            return True
        _, pending = await asyncio.wait(futures, timeout=timeout)
        return not pending

    def _over(self, session: Session) -> None:
        """``session`` is over: forget it (a summary stays in ``finished``), tell ``on_ended``."""
        done = self._done.pop(session.session_id, None)
        if done is not None and not done.done():
            done.set_result(None)
        siblings = self._tasks.get(session.task.task_id)
        if siblings is not None:
            siblings[:] = [s for s in siblings if s is not session]
            if not siblings:
                del self._tasks[session.task.task_id]
        if not session.withdrawn:
            self.finished.add(session.task.task_id, SessionSummary.of(session))
        if self.on_ended is not None:
            try:
                self.on_ended(session)
            except Exception:
                log.exception("session %s: on_ended failed", session.session_id)

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
            if ready and session.status is None:  # a withdrawn session has a status
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
            if session.withdrawn:  # its harness never started: no records, only the sandbox
                try:
                    await asyncio.shield(self.runner.teardown(session))
                except Exception:
                    log.exception("session %s: teardown failed", session.session_id)
                self._over(session)
                continue
            with self.meter.measure("post", session.session_id):
                try:
                    await self.runner.post(session)
                except Exception:
                    log.exception("session %s: post-run failed", session.session_id)
                finally:
                    # Shielded: a stopping worker must not leave a sandbox behind.
                    await asyncio.shield(self.runner.teardown(session))
            self._over(session)
