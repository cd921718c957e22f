"""The console's reading of Kafka: every record of the run's topics into its aggregates.

One consumer without a group (the console commits nothing and holds up no one) reads the
events, scored, trajectories (and each replay's ``trajectories.NAME``), dead-letter and control
topics from the beginning (or ``since``), and follows them. Topics made later, such as a replay's
output, are picked up when the topic list is looked at again. Each trajectory's place in its
topic is remembered (:class:`TrajectoryIndex`, bounded), so the viewer reads that one record
back when it is opened (:class:`RecordFetcher`) rather than the console holding every record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime

from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.consumers.console.fleet import Fleet
from rollstream.consumers.console.rewards import Rewards
from rollstream.consumers.export.run import RecordDecoder
from rollstream.errors import ConfigurationError
from rollstream.kafka.clients import make_consumer
from rollstream.kafka.parts import after
from rollstream.kafka.reading import seek
from rollstream.schemas import (
    AvroRecord,
    CallRecord,
    DeadLetter,
    PolicyVersion,
    Scored,
    SessionEnded,
    SessionStarted,
    TopicNames,
    Trajectory,
)
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)

#: How often the topic list is looked at again for new replay topics.
TOPICS_EVERY_S = 5.0
#: Records handled between two turns given to the rest of the event loop.
YIELD_EVERY = 100


@dataclass(frozen=True)
class Place:
    """Where a record is: topic, partition, offset (its first part's)."""

    topic: str
    partition: int
    offset: int
    session_id: str = ""


class TrajectoryIndex:
    """Trajectory id -> its places by topic; session id -> its trajectories by topic. Bounded."""

    def __init__(self, max_indexed: int = 1_000_000) -> None:
        self.max_indexed = max_indexed
        self.places: OrderedDict[str, dict[str, Place]] = OrderedDict()
        self.by_session: dict[str, dict[str, str]] = {}
        self.forgotten = 0

    def add(self, trajectory: Trajectory, place: Place) -> None:
        """Remember where ``trajectory`` is (a later record of it replaces the earlier)."""
        place = replace(place, session_id=trajectory.session_id)
        self.places.setdefault(trajectory.trajectory_id, {})[place.topic] = place
        self.places.move_to_end(trajectory.trajectory_id)
        self.by_session.setdefault(trajectory.session_id, {})[place.topic] = (
            trajectory.trajectory_id
        )
        while len(self.places) > self.max_indexed:
            gone, places = self.places.popitem(last=False)
            self.forgotten += 1
            for place in places.values():
                topics = self.by_session.get(place.session_id, {})
                if topics.get(place.topic) == gone:
                    del topics[place.topic]
                if not topics:
                    self.by_session.pop(place.session_id, None)

    def find(self, trajectory_id: str, topic: str | None) -> Place | None:
        """Where the trajectory is in ``topic`` (None: scored if it was, else any topic).

        A replay writes the same session under another id (``session/strategy``): asked for
        a topic the trajectory is not in, this finds its session's trajectory there.
        """
        places = self.places.get(trajectory_id, {})
        if topic is not None:
            if topic in places or not places:
                return places.get(topic)
            session = next(iter(places.values())).session_id
            other = self.by_session.get(session, {}).get(topic)
            return self.places.get(other, {}).get(topic) if other else None
        scored = [p for t, p in places.items() if t.endswith(".scored")]
        found = scored or list(places.values())
        return found[0] if found else None

    def topics_of(self, session_id: str) -> dict[str, str]:
        """The session's trajectories by topic."""
        return dict(self.by_session.get(session_id, {}))


def followed(names: TopicNames, topics: set[str]) -> set[str]:
    """Which of ``topics`` the console reads."""
    fixed = {names.events, names.scored, names.trajectories, names.deadletters, names.control}
    return {t for t in topics if t in fixed or t.startswith(f"{names.trajectories}.")}


@dataclass
class Aggregates:
    """What the console keeps of the records it reads: the fleet, the rewards, the index."""

    fleet: Fleet
    rewards: Rewards
    index: TrajectoryIndex

    def dispatch(self, record: AvroRecord, place: Place) -> None:
        """Hand one decoded record to the aggregates that count it."""
        if isinstance(record, CallRecord):
            self.fleet.call(record)
            self.rewards.policy_version(record.policy_version)
        elif isinstance(record, SessionStarted):
            self.fleet.started(record)
        elif isinstance(record, SessionEnded):
            self.fleet.ended(record)
        elif isinstance(record, Scored):
            self.rewards.scored(record)
            self.fleet.scored(
                record.trajectory.session_id, record.trajectory.trajectory_id, record.reward
            )
            self.index.add(record.trajectory, place)
        elif isinstance(record, Trajectory):
            self.fleet.reconstructed(record.session_id, record.trajectory_id)
            self.index.add(record, place)
        elif isinstance(record, DeadLetter):
            self.fleet.deadletter()
        elif isinstance(record, PolicyVersion):
            self.rewards.policy_version(record.version)


class Feed:
    """Reads the run's topics into a :class:`Fleet`, :class:`Rewards` and an index."""

    def __init__(
        self,
        kafka: KafkaSettings,
        fleet: Fleet,
        rewards: Rewards,
        index: TrajectoryIndex,
        since: datetime | None = None,
    ) -> None:
        self.kafka = kafka
        self.names = TopicNames(kafka.topic_prefix)
        self.aggregates = Aggregates(fleet, rewards, index)
        self.since = since
        self.read = 0
        self.undecodable = 0
        self.failed = 0  # decoded, but the aggregates failed on it (a bug: logged)
        self.caught_up = False
        self.died = False  # the reading ended on an error (logged)
        self._decoder = RecordDecoder(kafka)
        self._consumer = make_consumer(kafka)
        self._task: asyncio.Task[None] | None = None
        self._next: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        """Connect and start reading in the background."""
        await self._consumer.start()
        self._task = asyncio.create_task(self._run(), name="console-feed")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """Say why the reading ended, if it was not asked to: the figures stop moving."""
        if not task.cancelled() and task.exception() is not None:
            self.died = True
            log.error("console: reading Kafka stopped", exc_info=task.exception())

    async def stop(self) -> None:
        """Stop reading and disconnect (whatever ended the reading)."""
        try:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task  # a failure was logged when the task ended
        finally:
            await self._consumer.stop()
            await self._decoder.close()

    async def __aenter__(self) -> Feed:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def assigned(self) -> set[TopicPartition]:
        """The partitions being read."""
        return set(self._next)

    async def _assign(self) -> None:
        """Add the partitions of topics made since the last look, keeping every position."""
        # Fresh metadata: the consumer's own only knows topics it already tracks.
        cluster = await self._consumer._client.fetch_all_metadata()
        topics = followed(self.names, set(cluster.topics()))
        tps = [
            TopicPartition(t, p)
            for t in sorted(topics)
            for p in sorted(cluster.partitions_for_topic(t) or ())
        ]
        gone = [tp for tp in self._next if tp not in tps]
        for tp in gone:  # a deleted topic (a replay's, say): seeking it would fail
            del self._next[tp]
        new = [tp for tp in tps if tp not in self._next]
        if not new and not gone:
            return
        self._consumer.assign(tps)
        for tp, offset in self._next.items():
            self._consumer.seek(tp, offset)
        if new:
            await seek(self._consumer, new, self.since)
        for tp in new:
            self._next[tp] = await self._consumer.position(tp)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        looked = float("-inf")
        while True:
            try:
                if loop.time() - looked >= TOPICS_EVERY_S:
                    looked = loop.time()
                    await self._assign()
                if not self._next:
                    await asyncio.sleep(0.5)
                    continue
                batch = await self._consumer.getmany(timeout_ms=200, max_records=2000)
            except (KafkaError, ConfigurationError) as exc:
                # The broker away a while: the figures wait, the console goes on serving.
                log.warning("console: reading Kafka failed (%s); again in a second", exc)
                await asyncio.sleep(1.0)
                continue
            handled = 0
            for tp, messages in batch.items():
                for message in messages:
                    handled += 1
                    if handled % YIELD_EVERY == 0:
                        await asyncio.sleep(0)  # let the server answer while catching up
                    try:
                        await self._handle(tp, message)
                    except Exception:  # one record must not stop the console's reading
                        self.failed += 1
                        log.exception(
                            "console: %s@%d could not be counted; skipped",
                            tp,
                            message.offset,
                        )
                    self._next[tp] = after(message)
            if not batch:
                self.caught_up = True

    async def _handle(self, tp: TopicPartition, message: ConsumerRecord) -> None:
        self.read += 1
        if message.value is None:
            return  # a compacted topic's tombstone
        record = await self._decoder.decode(message.value)
        if record is None:
            self.undecodable += 1
            log.warning("console: %s@%d cannot be decoded; skipped", tp, message.offset)
            return
        self.dispatch(record, Place(tp.topic, tp.partition, message.offset))

    def dispatch(self, record: AvroRecord, place: Place) -> None:
        """Hand one decoded record to the aggregates that count it."""
        self.aggregates.dispatch(record, place)


class RecordFetcher:
    """Reads single records back by their place (one at a time, on its own consumer)."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        self._decoder = RecordDecoder(kafka)
        self._consumer = make_consumer(kafka)
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Connect."""
        await self._consumer.start()

    async def stop(self) -> None:
        """Disconnect."""
        await self._consumer.stop()
        await self._decoder.close()

    async def fetch(self, place: Place) -> AvroRecord | None:
        """The record at ``place``; None when it is gone (retention or compaction).

        Raises TimeoutError when it is not read in ``timeout_s`` (the broker away, say).
        """
        tp = TopicPartition(place.topic, place.partition)
        async with self._lock:
            self._consumer.assign([tp])
            self._consumer.seek(tp, place.offset)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout_s
            while loop.time() < deadline:
                batch = await self._consumer.getmany(tp, timeout_ms=500, max_records=50)
                for message in batch.get(tp, []):
                    if message.offset == place.offset and message.value is not None:
                        return await self._decoder.decode(message.value)
                    if message.offset > place.offset:
                        return None  # deleted by retention or compaction
            raise TimeoutError(f"{place.topic}@{place.offset} not read in {self.timeout_s:g}s")
