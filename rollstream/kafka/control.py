"""The control topic: trainers publish the policy version, the capture side follows it.

A trainer calls :func:`publish_policy_version` after a weight update; the interceptor and the
rollout nodes each run a :class:`PolicyWatcher` and stamp the latest version into the records
they write from then on. The topic is compacted on the record kind, so a watcher starting late
still finds the current version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from rollstream.errors import BrokerError, ConfigurationError, SerializationError
from rollstream.kafka.clients import (
    behind,
    make_consumer,
    make_producer,
    topic_partitions,
)
from rollstream.schemas import POLICY_VERSION_KEY, AvroSerializer, PolicyVersion, TopicNames, utcnow
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)


async def publish_policy_version(
    kafka: KafkaSettings,
    version: int,
    publisher: str = "",
    metadata: dict[str, str] | None = None,
) -> PolicyVersion:
    """Write ``version`` to the control topic and wait until the broker has it."""
    record = PolicyVersion(
        version=version, published_at=utcnow(), publisher=publisher, metadata=metadata or {}
    )
    producer = make_producer(kafka, linger_ms=0)
    try:
        await producer.start()
        await producer.send_and_wait(
            TopicNames(kafka.topic_prefix).control,
            AvroSerializer().encode(record),
            key=POLICY_VERSION_KEY,
        )
    except KafkaError as exc:
        raise BrokerError(f"publishing policy version {version} failed: {exc}") from exc
    finally:
        await producer.stop()
    return record


_LONG_POLL_MS = 20_000
"""How long the broker holds a fetch of the control topic that finds nothing new."""


class PolicyWatcher:
    """Follows the control topic and calls ``on_version`` with each policy version published.

    ``start()`` returns once the topic has been read to its end, so :attr:`current` is the
    latest version already published (None if none was); later ones arrive in the background.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        on_version: Callable[[PolicyVersion], None] | None = None,
    ) -> None:
        self.kafka = kafka
        self.topic = TopicNames(kafka.topic_prefix).control
        self.on_version = on_version
        self.current: PolicyVersion | None = None
        self._serializer = AvroSerializer()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Read the control topic to its end, then follow it."""
        # No consumer group, so no group coordinator: safe under an eager task factory.
        # Following is a long poll: the broker holds each fetch until a version is published
        # (and answers it at once) or _LONG_POLL_MS pass, and the background fetcher wakes no
        # more often. Fetching on aiokafka's defaults (a fetch every 0.5 s, a wake-up every
        # 0.2 s) cost the interceptor about 3 ms of CPU a second; pausing the partition
        # between looks once a second still left the wake-ups.
        self._consumer = make_consumer(
            self.kafka,
            isolation_level="read_uncommitted",
            fetch_max_wait_ms=_LONG_POLL_MS,
            consumer_timeout_ms=_LONG_POLL_MS,
            request_timeout_ms=_LONG_POLL_MS + 20_000,
            # Never paused now: with the broker away it would retry ten times a second, each
            # retry logging errors and forcing a metadata refresh.
            retry_backoff_ms=1000,
        )
        try:
            await self._consumer.start()
            tps = await topic_partitions(self._consumer, self.topic)
            if not tps:
                raise ConfigurationError(f"no topic {self.topic}: run `rollstream topics create`")
            # The end first: once a fetch is held by the broker, any other request on its
            # connection waits behind it (a broker answers a connection's requests in order).
            end = await self._consumer.end_offsets(tps)
            self._consumer.assign(tps)
            await self._consumer.seek_to_beginning(*tps)
            while await behind(self._consumer, end):
                await self._poll()
        except BaseException:  # failed or cancelled mid-start: leave nothing open
            await self.stop()
            raise
        self._task = asyncio.create_task(self._follow(), name="policy-watcher")

    async def stop(self) -> None:
        """Stop following and close the consumer."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            self._consumer = None

    async def __aenter__(self) -> PolicyWatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def version(self) -> int:
        """The latest published version, 0 before any was."""
        return self.current.version if self.current is not None else 0

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                await self._poll(_LONG_POLL_MS)
            except KafkaError as exc:  # the broker away: keep the last version, try again
                log.warning("control topic: %s", exc)
                await asyncio.sleep(1.0)

    async def _poll(self, timeout_ms: int = 500) -> None:
        assert self._consumer is not None
        batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        for messages in batches.values():
            for message in messages:
                if message.key != POLICY_VERSION_KEY or message.value is None:
                    continue
                try:
                    record = self._serializer.decode_as(message.value, PolicyVersion)
                except SerializationError as exc:  # not ours to stop on; said once per record
                    log.warning("control topic offset %d: %s", message.offset, exc)
                    continue
                self.current = record
                if self.on_version is not None:
                    self.on_version(record)


class PolicyFollower:
    """A :class:`PolicyWatcher` for services that must start without Kafka.

    ``start()`` returns at once; the watcher is started in the background and retried every
    ``retry_s`` while the broker or the control topic is missing, so an interceptor or a node
    comes up (and spools) with the broker away and picks the version up when it returns.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        on_version: Callable[[PolicyVersion], None],
        retry_s: float = 5.0,
    ) -> None:
        self.kafka = kafka
        self.on_version = on_version
        self.retry_s = retry_s
        self.watcher: PolicyWatcher | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Begin connecting in the background."""
        self._task = asyncio.create_task(self._connect(), name="policy-follower")

    async def _connect(self) -> None:
        while True:
            watcher = PolicyWatcher(self.kafka, self.on_version)
            try:
                await watcher.start()
            except (ConfigurationError, KafkaError, OSError) as exc:
                log.info("policy versions not followed yet (%s); retrying", exc)
                await watcher.stop()
                await asyncio.sleep(self.retry_s)
                continue
            self.watcher = watcher
            return

    async def stop(self) -> None:
        """Stop connecting or following."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.watcher is not None:
            await self.watcher.stop()
            self.watcher = None

    async def __aenter__(self) -> PolicyFollower:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
