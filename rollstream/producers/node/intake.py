"""The node's side of the tasks topic: a consumer group member that hands partitions over cleanly.

Each task record becomes sessions on the scheduler, one per sample not yet done. What holds:

- **Commit point.** A partition's committed offset never passes a record with a sample still
  to run; the samples finished past it ride in the commit's metadata (``progress``). A commit
  follows every session's end; one that fails is logged and counted, the partition stays
  marked behind and the commit is retried.
- **Join, leave, rebalance** (the consumer's rebalance listener, and ``stop``): the revoked
  partitions' sessions whose harness has not started are withdrawn (no records); the running
  ones get ``handoff_timeout_s`` to finish, the rest are cancelled and handed back (they end
  ``cancelled``); then the progress is committed and forgotten. The next owner reads it back
  and runs only the samples nobody finished: no sample completes twice, none is lost.
- **Crash** (SIGKILL, a lost machine): the next owner resumes from the last commit, so a
  sample that finished after it runs again (at least once): its two SessionEnded records share
  ``task_id`` and ``sample_index``, which is how a reader detects the duplicate. A session cut
  by the crash never ends; the reconstructor closes it ``abandoned``.
- **Backpressure.** While ``queue_bound`` samples wait for an init slot the consumer's
  partitions are paused (and a batch is cut short, the rest sought back), so a backlog stays
  on the topic for the other nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import SerializationError
from rollstream.kafka.clients import make_consumer, ordinary_tasks
from rollstream.producers.node.letters import DeadLetters
from rollstream.producers.node.pool import NodeScheduler
from rollstream.producers.node.progress import PartitionProgress, TaskEntry
from rollstream.producers.node.session import Session
from rollstream.producers.node.settings import NodeSettings
from rollstream.schemas import AvroSerializer, Task, TopicNames
from rollstream.schemas.sessions import HANDED_BACK
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)
_COMMIT_RETRY_S = 5.0  # a partition behind (a failed commit) is tried again this often
# How long a commit waits for the lifecycle records before it: past the publisher's ack wait
# (send_timeout_s, 10 s by default), after which they are spooled, hence safe, anyway.
_SETTLE_S = 15.0
_POST_RUN_S = 30.0  # for sessions cancelled at the hand-off bound to go through post-run


@dataclass
class IntakeMetrics:
    """What the intake did, for ``/metrics``."""

    tasks: int = 0
    samples_skipped: int = 0  # done by an earlier owner of the partition
    samples_withdrawn: int = 0  # given back before their harness started
    sessions_handed_back: int = 0  # cancelled at the hand-off bound, to run again elsewhere
    commits_failed: int = 0
    loop_failures: int = 0  # the intake's or the committer's loop raised and was restarted
    commits_deferred: int = 0  # lifecycle records not yet safe: the commit waits
    progress_left_out: int = 0  # metadata items left out for the broker's size limit
    paused: bool = False


@dataclass
class _Origin:
    tp: TopicPartition
    entry: TaskEntry
    session: Session


class TaskIntake(ConsumerRebalanceListener):  # type: ignore[misc]
    """Takes tasks off the topic onto the scheduler, commits, hands partitions over."""

    def __init__(
        self,
        settings: NodeSettings,
        kafka: KafkaSettings,
        scheduler: NodeScheduler,
        serializer: AvroSerializer,
        settled: Callable[[float], Awaitable[bool]] | None = None,
    ) -> None:
        self.settings = settings
        # Whether the lifecycle records published so far would survive a crash (the
        # publisher's settled()): a sample is committed as run only once its SessionEnded has.
        self._settled = settled
        self.kafka = kafka
        self.names = TopicNames(kafka.topic_prefix)
        self.scheduler = scheduler
        self.serializer = serializer
        self.metrics = IntakeMetrics()
        self._consumer: AIOKafkaConsumer | None = None
        self._progress: dict[TopicPartition, PartitionProgress] = {}
        self._origins: dict[str, _Origin] = {}  # session id -> its record
        self._lock = asyncio.Lock()  # one of: a batch taken, a hand-off, an assignment
        self._commit_lock = asyncio.Lock()  # commits in the order their progress was read
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.letters = DeadLetters(kafka, serializer, settings.group, self.names.deadletters)

    async def start(self) -> None:
        """Join the group and start taking tasks."""
        # The rebalance waits for the hand-off: the broker must not give up on this member.
        rebalance_ms = int((self.settings.handoff_timeout_s + _POST_RUN_S + 30) * 1000)
        self._consumer = make_consumer(
            self.kafka,
            group_id=self.settings.group,
            rebalance_timeout_ms=rebalance_ms,
            max_poll_interval_ms=max(300_000, rebalance_ms + 30_000),
        )
        self._consumer.subscribe([self.names.tasks], listener=self)
        with ordinary_tasks():  # an interceptor may share this loop (see ordinary_tasks)
            await self._consumer.start()
        self._tasks = [
            asyncio.create_task(self._keep(self._take, "taking tasks"), name="node-intake"),
            asyncio.create_task(self._keep(self._commit_often, "committing"), name="node-commits"),
        ]

    async def _keep(self, loop: Callable[[], Awaitable[None]], what: str) -> None:
        """Run ``loop`` for the node's life; an unexpected error is logged, counted, retried.

        A loop that ended quietly would leave a node that looks healthy but no longer takes
        tasks or commits what it ran.
        """
        while True:
            try:
                await loop()
            except Exception:
                self.metrics.loop_failures += 1
                log.exception("%s failed; starting again in %g s", what, _COMMIT_RETRY_S)
                await asyncio.sleep(_COMMIT_RETRY_S)

    async def stop(self) -> None:
        """Stop taking tasks, hand every partition over (see the module docs), leave."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.hand_over(set(self._progress))
        if self._consumer is not None:
            await self._consumer.stop()
        await self.letters.stop()

    @property
    def partitions_behind(self) -> int:
        """Partitions whose progress the broker has not acknowledged."""
        return sum(1 for p in self._progress.values() if p.behind)

    # -- the rebalance listener ----------------------------------------------------------

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Hand the revoked partitions over before the group reassigns them."""
        await self.hand_over(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Start each partition from its committed offset and the progress named with it."""
        assert self._consumer is not None
        async with self._lock:
            try:
                # The public committed() drops the metadata, which holds the samples done.
                coordinator = self._consumer._coordinator
                committed = await coordinator.fetch_committed_offsets(list(assigned))
            except KafkaError as exc:
                log.error("committed progress unreadable, samples done may run again: %s", exc)
                committed = {}
            for tp in assigned:
                point = committed.get(tp)
                if point is None or point.offset < 0:
                    self._progress[tp] = PartitionProgress()
                else:
                    self._progress[tp] = PartitionProgress(point.offset, point.metadata or "")

    async def hand_over(self, tps: set[TopicPartition]) -> None:
        """Give up ``tps``: withdraw, let run (bounded) or hand back, commit, forget."""
        async with self._lock:
            tps &= set(self._progress)
            if not tps:
                return
            origins = [o for o in self._origins.values() if o.tp in tps]
            sessions = [o.session for o in origins]
            withdrawn = self.scheduler.withdraw(sessions)
            self.metrics.samples_withdrawn += len(withdrawn)
            running = [s for s in sessions if not s.withdrawn]
            log.info(
                "handing over %s: %d samples withdrawn, waiting up to %gs for %d running",
                sorted(tp.partition for tp in tps),
                len(withdrawn),
                self.settings.handoff_timeout_s,
                len(running),
            )
            if not await self.scheduler.wait(running, self.settings.handoff_timeout_s):
                cut = self.scheduler.hand_back(running, HANDED_BACK)
                self.metrics.sessions_handed_back += len(cut)
                log.warning("%d sessions cut short at the hand-off bound: they run again", len(cut))
                await self.scheduler.wait(running, _POST_RUN_S)
            if not await self.commit(tps):
                log.error(
                    "partitions %s change hands with their progress not committed: samples "
                    "finished since the last commit run again there",
                    sorted(tp.partition for tp in tps),
                )
            for tp in tps:
                del self._progress[tp]
            for origin in origins:
                self._origins.pop(origin.session.session_id, None)

    # -- sessions ending, commits --------------------------------------------------------

    def on_ended(self, session: Session) -> None:
        """A session is over: its sample is done unless it was withdrawn or handed back."""
        origin = self._origins.pop(session.session_id, None)
        if origin is None:
            return
        if not (session.withdrawn or session.handed_back):
            origin.entry.done.add(session.sample)
            self._dirty.set()

    async def commit(self, tps: set[TopicPartition] | None = None) -> bool:
        """Commit the progress of ``tps`` (default: all) where it moved; whether it all held."""
        if self._consumer is None:
            return False
        async with self._commit_lock:
            points = {}
            for tp, progress in self._progress.items():
                if (tps is None or tp in tps) and progress.behind:
                    point = progress.point()
                    assert point is not None
                    points[tp] = (progress, point)
            if not points:
                return True
            for _, point in points.values():
                if point.left_out:
                    self.metrics.progress_left_out += point.left_out
                    log.warning(
                        "commit metadata full: %d items left out (those samples run again "
                        "if the partition moves before they are committed)",
                        point.left_out,
                    )
            offsets = {tp: (point.offset, point.metadata) for tp, (_, point) in points.items()}
            if self._settled is not None and not await self._settled(_SETTLE_S):
                # A crash now would lose a SessionEnded whose sample the commit calls run:
                # the sample would never run again and never end. Commit later instead.
                self.metrics.commits_deferred += 1
                log.warning("commit deferred: lifecycle records not yet acknowledged or spooled")
                return False
            try:
                await self._consumer.commit(offsets)
            except KafkaError as exc:
                self.metrics.commits_failed += 1
                log.error("commit of %s failed (retried): %s", offsets, exc)
                return False
            for progress, point in points.values():
                progress.acked = point
            return True

    async def _commit_often(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), _COMMIT_RETRY_S)
            self._dirty.clear()
            await self.commit()

    # -- taking tasks --------------------------------------------------------------------

    def _full(self) -> bool:
        return self.scheduler.queued >= self.settings.queue_bound

    def _backpressure(self) -> None:
        assert self._consumer is not None
        full = self._full()
        if full != self.metrics.paused:
            log.info("task intake %s", "paused: enough samples queued" if full else "resumed")
            self.metrics.paused = full
        if full:
            self._consumer.pause(*self._consumer.assignment())
        elif paused := self._consumer.paused():
            self._consumer.resume(*paused)

    async def _take(self) -> None:
        assert self._consumer is not None
        while True:
            self._backpressure()
            room = max(1, self.settings.queue_bound - self.scheduler.queued)
            batch = await self._consumer.getmany(timeout_ms=500, max_records=room)
            async with self._lock:
                for tp, messages in batch.items():
                    progress = self._progress.get(tp)
                    if progress is None:
                        continue  # handed over meanwhile: the next owner reads them
                    for message in messages:
                        if self._full():
                            # The rest stays on the topic, for this node later or another.
                            self._consumer.seek(tp, message.offset)
                            break
                        await self._take_one(tp, progress, message)
                written = await self.letters.retry(self._progress)
            if batch or written:
                self._dirty.set()  # a dead-lettered record alone moves the commit point

    async def _take_one(
        self, tp: TopicPartition, progress: PartitionProgress, message: ConsumerRecord
    ) -> None:
        if progress.seen(message.offset):
            return
        try:
            task = self.serializer.decode_as(message.value or b"", Task)
        except SerializationError as exc:
            log.error(
                "task record %s[%d]@%d cannot be decoded, dead-lettered: %s",
                message.topic,
                message.partition,
                message.offset,
                exc,
            )
            await self.letters.take(tp, progress, message, exc)
            return
        entry = progress.take(message.offset, task.samples)
        self.metrics.tasks += 1
        todo = entry.todo()
        if len(todo) < task.samples:
            self.metrics.samples_skipped += task.samples - len(todo)
            log.info(
                "task %s: samples %s done by an earlier owner, running %s",
                task.task_id,
                sorted(entry.done),
                todo,
            )
        for session in self.scheduler.submit(task, todo) if todo else []:
            self._origins[session.session_id] = _Origin(tp, entry, session)
