"""SyncTrajectoryStream: the trainer stream for training loops that are not async.

```python
with SyncTrajectoryStream(TrainerSettings(max_staleness=2), group="trainer-a") as stream:
    for group in stream.groups():
        version = train_step(to_batch(group, layout="packed"))
        stream.commit()
        stream.publish_policy_version(version)
```

A :class:`~rollstream.consumers.trainer.stream.TrajectoryStream` runs on an event loop of its
own in a background thread (one loop and one thread per stream); every method hands its work to that
loop and blocks until it is done, so an exception raised there is raised in the caller.
Between two calls the loop keeps the consumer's heartbeats going, even while a training step
holds the calling thread. The semantics (groups, staleness, commits, positions) are the async
stream's: see docs/trainer-client.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

from rollstream.consumers.trainer.groups import Group, RecordBatch, StreamMetrics
from rollstream.consumers.trainer.ledger import Partition, StreamPosition
from rollstream.consumers.trainer.settings import TrainerSettings
from rollstream.consumers.trainer.stream import TrajectoryStream
from rollstream.errors import ConfigurationError
from rollstream.schemas import PolicyVersion
from rollstream.settings import KafkaSettings


class SyncTrajectoryStream:
    """A blocking iterator of GRPO groups (or plain batches) for one trainer.

    Takes the arguments of :class:`~rollstream.consumers.trainer.stream.TrajectoryStream`. Use
    ``with`` (or :meth:`start` / :meth:`close`); iterate :meth:`groups` (or :meth:`batches`), train,
    then :meth:`commit`. Only one thread iterates at a time; :meth:`commit`, :meth:`positions`
    and the rest may be called from any thread, also while another waits for the next group.
    """

    def __init__(
        self,
        settings: TrainerSettings | None = None,
        group: str = "trainer-a",
        kafka: KafkaSettings | None = None,
        *,
        start_offsets: StreamPosition | Mapping[Partition, int] | None = None,
        partitions: Sequence[int] | None = None,
    ) -> None:
        self.stream = TrajectoryStream(
            settings, group, kafka, start_offsets=start_offsets, partitions=partitions
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._iterating = threading.Lock()  # one next() at a time
        self._state = threading.Lock()  # _closed and _waiting, between next() and close()
        self._waiting: concurrent.futures.Future[None] | None = None
        # Taken from the stream (so finished in its ledger) but not yet returned by next():
        # a caller interrupted while waiting gets it from the next call instead of losing it.
        self._undelivered: deque[Group | RecordBatch] = deque()
        self._closed = False

    @property
    def settings(self) -> TrainerSettings:
        """The stream's settings."""
        return self.stream.settings

    @property
    def group(self) -> str:
        """The consumer group."""
        return self.stream.group

    @property
    def policy_version(self) -> int:
        """The trainer's current policy version; groups too far behind it are dropped."""
        return self._touch(lambda: self.stream.policy_version)

    @policy_version.setter
    def policy_version(self, version: int) -> None:
        def assign() -> None:
            self.stream.policy_version = version

        self._touch(assign)

    @property
    def metrics(self) -> StreamMetrics:
        """A snapshot of the stream's counters (a copy taken on the stream's loop)."""
        return self._touch(lambda: dataclasses.replace(self.stream.metrics))

    def start(self) -> None:
        """Start the loop thread and join the consumer group; a failure leaves nothing running."""
        if self._loop is not None:
            raise ConfigurationError("the stream is already started")
        self._closed = False
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._run, args=(loop,), name=f"rollstream-trainer-{self.group}", daemon=True
        )
        self._thread.start()
        try:
            self._call(self.stream.start())
        except BaseException:
            self._shutdown()
            raise

    def close(self) -> None:
        """Leave the group (without committing), stop the loop and join its thread.

        An iteration waiting in another thread ends (its loop returns). Calling it twice is
        harmless.
        """
        with self._state:
            if self._loop is None:
                return
            self._closed = True
            waiting = self._waiting
        if waiting is not None:
            waiting.cancel()  # the stream stops taking records at a safe point
        try:
            self._call(self.stream.stop())
        finally:
            self._shutdown()

    def __enter__(self) -> SyncTrajectoryStream:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Group | RecordBatch]:
        """Groups (groups mode) or batches (batches mode), blocking for each."""
        while True:
            item = self.next()
            if item is None:
                return
            yield item

    def next(self) -> Group | RecordBatch | None:
        """The next group or batch, waiting for one; None once the stream is closed."""
        with self._iterating:
            with self._state:
                if self._closed:
                    return None
                if self._undelivered:
                    return self._undelivered.popleft()
                loop = self._require()
                future = asyncio.run_coroutine_threadsafe(self._take(), loop)
                self._waiting = future
            try:
                future.result()
            except concurrent.futures.CancelledError:
                if self._closed:
                    return None
                raise
            except BaseException:
                future.cancel()  # e.g. KeyboardInterrupt: stop reading; a group taken is kept
                raise
            finally:
                self._waiting = None
            return self._undelivered.popleft() if self._undelivered else None

    def groups(self) -> Iterator[Group]:
        """The stream as groups only (groups mode), for precise typing."""
        if self.settings.mode != "groups":
            raise ConfigurationError("groups() needs mode groups")
        for item in self:
            assert isinstance(item, Group)
            yield item

    def batches(self) -> Iterator[RecordBatch]:
        """The stream as plain batches only (batches mode), for precise typing."""
        if self.settings.mode != "batches":
            raise ConfigurationError("batches() needs mode batches")
        for item in self:
            assert isinstance(item, RecordBatch)
            yield item

    def commit(self) -> dict[Partition, int]:
        """Commit what was delivered or dropped; see :meth:`TrajectoryStream.commit`."""
        return self._call(self.stream.commit())

    def positions(self) -> StreamPosition:
        """Where to resume exactly once; see :meth:`TrajectoryStream.positions`."""
        return self._touch(self.stream.positions)

    def publish_policy_version(
        self, version: int, metadata: dict[str, str] | None = None
    ) -> PolicyVersion:
        """Publish ``version`` on the control topic and use it for staleness."""
        return self._call(self.stream.publish_policy_version(version, metadata))

    async def _take(self) -> None:
        """Move the stream's next item to ``_undelivered`` (nothing at the stream's end)."""
        try:
            item = await anext(self.stream)
        except StopAsyncIteration:
            return
        self._undelivered.append(item)

    def _require(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise ConfigurationError("the stream is not started: use `with` or start()")
        return self._loop

    def _submit[T](self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``work`` on the loop, never after the loop was told to stop.

        Under ``_state``, as :meth:`_shutdown`: work scheduled before the stop is cancelled by
        :meth:`_run` rather than left for a caller to wait on forever.
        """
        with self._state:
            try:
                loop = self._require()
            except ConfigurationError:
                work.close()  # never awaited: no warning about it
                raise
            return asyncio.run_coroutine_threadsafe(work, loop)

    def _call[T](self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the stream's loop and wait for it (its exception is raised here)."""
        return self._submit(work).result()

    def _touch[T](self, read: Callable[[], T]) -> T:
        """``read()`` on the loop while it runs, else here.

        The stream's state is touched from the loop's thread only; without a loop, settings
        made before :meth:`start` and counters read after :meth:`close` work too.
        """

        async def run() -> T:
            return read()

        with self._state:
            if self._loop is None:
                return read()
        return self._call(run())

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            # Whatever was scheduled before the stop ends (cancelled) so no caller waits on it.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _shutdown(self) -> None:
        """Stop the loop and join its thread."""
        with self._state:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join()
