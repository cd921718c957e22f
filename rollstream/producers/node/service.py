"""The rollout node as a service: tasks from Kafka in, sessions run, lifecycle records out.

Tasks are read in a consumer group, so several nodes share the stream. A task's offset is
committed once every session of it has ended (and of every earlier task on its partition): a
node that crashes mid-task runs it again on restart — at least once, the safe side for
training data, since a re-run adds fresh samples and never repeats a session id. SessionStarted
and SessionEnded go through the capture publisher (spooled while the broker is away), keyed by
session id, onto the events topic beside the interceptor's calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.clients import make_consumer, make_producer, ordinary_tasks
from rollstream.consumers.deadletters import dead_letter
from rollstream.control import PolicyFollower
from rollstream.errors import BrokerError, SerializationError
from rollstream.producers.node.pool import NodeScheduler
from rollstream.producers.node.runtime import make_runtime
from rollstream.producers.node.session import SessionRunner
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher import CapturePublisher, PublisherSettings
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    PolicyVersion,
    SessionEnded,
    SessionStarted,
    Task,
    TopicNames,
)
from rollstream.settings import KafkaSettings, StatePaths

log = logging.getLogger(__name__)
# Registration precedes a harness's start: an admin port that is not there must not delay it.
_REGISTRATION_TIMEOUT = aiohttp.ClientTimeout(total=2)
#: Task metadata naming the interceptor's context mode for the task's sessions (exact|ordinary).
CONTEXT_METADATA = "context"
_LETTER_TIMEOUT_S = 10.0
_LETTER_BACKOFF_S = 60.0


@dataclass
class _Pending:
    """Tasks of one partition in offset order, and which of them are done."""

    offsets: list[tuple[int, str]] = field(default_factory=list)
    done: set[str] = field(default_factory=set)

    def committable(self) -> int | None:
        """The offset after the longest run of finished tasks from the front."""
        last = None
        while self.offsets and self.offsets[0][1] in self.done:
            offset, task_id = self.offsets.pop(0)
            self.done.discard(task_id)
            last = offset + 1
        return last


class Node:
    """Consumes tasks, runs their sessions, publishes their lifecycle; see the module docs."""

    def __init__(
        self,
        settings: NodeSettings,
        kafka: KafkaSettings,
        publisher: PublisherSettings | None = None,
        paths: StatePaths | None = None,
    ) -> None:
        self.settings = settings
        self.kafka = kafka
        self.names = TopicNames(kafka.topic_prefix)
        self.serializer = AvroSerializer()
        spool = (paths or StatePaths()).state_dir / "spool" / f"node-{settings.node_id}"
        self.publisher = CapturePublisher(
            kafka, publisher or PublisherSettings(), self.names.events, spool
        )
        self.runtime = make_runtime(settings)
        self.runner = SessionRunner(settings, self.runtime, self._emit, self._calls_of)
        self.scheduler = NodeScheduler(self.runner, settings)
        self.policy = PolicyFollower(kafka, self._on_policy)
        self.tasks_seen = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._letters: AIOKafkaProducer | None = None  # dead letters, made on first use
        self._letters_retry_at = 0.0  # loop time before which dead letters are not tried
        self._http: aiohttp.ClientSession | None = None
        self._intake: asyncio.Task[None] | None = None
        self._pending: dict[TopicPartition, _Pending] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._api: web.AppRunner | None = None
        self._stopping = False
        self.port = settings.port

    def _on_policy(self, version: PolicyVersion) -> None:
        log.info("policy version %d: stamped into sessions from now on", version.version)
        self.runner.policy_version = version.version

    async def start(self) -> None:
        """Publisher, scheduler, HTTP API, then the task consumer."""
        from rollstream.producers.node.api import NodeApi

        await self.publisher.start()
        await self.policy.start()
        await self.scheduler.start()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        self._api = web.AppRunner(NodeApi(self).app(), access_log=None)
        await self._api.setup()
        await web.TCPSite(self._api, self.settings.host, self.settings.port).start()
        self.port = self._api.addresses[0][1]
        self._consumer = make_consumer(self.kafka, group_id=self.settings.group)
        self._consumer.subscribe([self.names.tasks])
        with ordinary_tasks():  # an interceptor may share this loop (see ordinary_tasks)
            await self._consumer.start()
        self._intake = asyncio.create_task(self._take_tasks(), name="node-intake")

    async def stop(self) -> None:
        """Stop taking tasks, cancel running sessions (they still end), flush the records."""
        self._stopping = True
        if self._intake is not None:
            self._intake.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._intake
        await self.scheduler.close()
        await self.runtime.close()
        for watcher in list(self._watchers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
        await self._commit()
        await self.policy.stop()
        if self._consumer is not None:
            await self._consumer.stop()
        if self._letters is not None:
            await self._letters.stop()
        if self._api is not None:
            await self._api.cleanup()
        if self._http is not None:
            await self._http.close()
        await self.publisher.stop()

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """The HTTP API's base URL."""
        return f"http://{self.settings.host}:{self.port}"

    async def _take_tasks(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=500)
            for tp, messages in batch.items():
                for message in messages:
                    task = await self._decode(message)
                    pending = self._pending.setdefault(tp, _Pending())
                    if task is None:  # nothing to run (dead-lettered): done at once
                        pending.offsets.append((message.offset, f"@{message.offset}"))
                        pending.done.add(f"@{message.offset}")
                        continue
                    pending.offsets.append((message.offset, task.task_id))
                    self.tasks_seen += 1
                    self.scheduler.submit(task)
                    watcher = asyncio.create_task(self._watch(tp, task.task_id))
                    self._watchers.add(watcher)
                    watcher.add_done_callback(self._watchers.discard)
            await self._commit()

    async def _decode(self, message: ConsumerRecord) -> Task | None:
        try:
            return self.serializer.decode_as(message.value or b"", Task)
        except SerializationError as exc:
            log.error(
                "task record %s[%d]@%d cannot be decoded, dead-lettered: %s",
                message.topic,
                message.partition,
                message.offset,
                exc,
            )
            await self._dead_letter(message, exc)
            return None

    async def _dead_letter(self, message: ConsumerRecord, exc: Exception) -> None:
        """Write the record to the dead-letter topic; if the broker refuses, the log says so.

        Sent before the offset is committed past it. Poison is rare: the producer is made on
        first use.
        """
        loop = asyncio.get_running_loop()
        if loop.time() < self._letters_retry_at:
            # The broker refused a moment ago: the intake must not stall on every poison record.
            log.error("not dead-lettered (retrying later): %s@%d", message.topic, message.offset)
            return
        letter = self.serializer.encode(dead_letter(message, exc, self.settings.group))
        try:
            producer = await self._letter_producer()
            await asyncio.wait_for(
                producer.send_and_wait(self.names.deadletters, letter, key=message.key),
                _LETTER_TIMEOUT_S,
            )
        except (KafkaError, TimeoutError, OSError) as error:
            self._letters_retry_at = loop.time() + _LETTER_BACKOFF_S
            log.error("could not dead-letter %s@%d: %s", message.topic, message.offset, error)

    async def _letter_producer(self) -> AIOKafkaProducer:
        """The dead-letter producer, started once it could start (a failed start is retried)."""
        if self._letters is not None:
            return self._letters
        producer = make_producer(self.kafka)
        try:
            with ordinary_tasks():
                await asyncio.wait_for(producer.start(), _LETTER_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        self._letters = producer
        return producer

    async def _watch(self, tp: TopicPartition, task_id: str) -> None:
        await self.scheduler.join(task_id)
        if self._stopping:
            return  # cut short by this node's shutdown: left uncommitted, so it runs again
        self._pending[tp].done.add(task_id)
        await self._commit()

    async def _commit(self) -> None:
        if self._consumer is None:
            return
        offsets = {}
        for tp, pending in self._pending.items():
            offset = pending.committable()
            if offset is not None:
                offsets[tp] = offset
        if offsets:
            with contextlib.suppress(Exception):  # a rebalance meanwhile: re-run, not lost
                await self._consumer.commit(offsets)

    async def _emit(self, record: AvroRecord) -> None:
        session = str(getattr(record, "session_id", ""))
        if isinstance(record, SessionStarted):
            # Emitted before the harness starts: registered now, its calls are accepted by an
            # interceptor in strict mode from the first, in the context mode its task asks.
            context = record.task.metadata.get(CONTEXT_METADATA) if record.task else None
            await self._registration("PUT", session, {"context": context} if context else None)
        self.publisher.publish(session.encode(), self.serializer.encode(record))
        if isinstance(record, SessionEnded):
            await self._registration("DELETE", session)

    async def _registration(
        self, method: str, session: str, body: dict[str, str] | None = None
    ) -> None:
        """Register (PUT) or forget (DELETE) the session on the interceptor's admin port.

        An interceptor in strict mode needs it, and one told the session's context mode
        (``body``). A failure is logged, never fatal: the harness's calls are then refused
        there (401), which its session's outcome shows, or rendered in the default mode.
        """
        assert self._http is not None
        url = f"{self.settings.interceptor_admin.rstrip('/')}/sessions/{session}"
        try:
            async with self._http.request(
                method, url, json=body, timeout=_REGISTRATION_TIMEOUT
            ) as reply:
                if reply.status >= 400:
                    log.warning("session %s: %s %s: %s", session, method, url, reply.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("session %s: %s %s failed: %s", session, method, url, exc)

    async def _calls_of(self, session: str) -> int:
        """How many calls the interceptor recorded for the session, once none is in flight."""
        assert self._http is not None
        url = f"{self.settings.interceptor_admin.rstrip('/')}/sessions/{session}"
        for _ in range(50):  # a harness may exit while its last call is still being recorded
            try:
                async with self._http.get(url) as response:
                    body = await response.json()
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise BrokerError(f"the interceptor's admin port at {url}: {exc}") from exc
            if not body.get("in_flight"):
                return int(body.get("calls_recorded", 0))
            await asyncio.sleep(0.1)
        return int(body.get("calls_recorded", 0))
