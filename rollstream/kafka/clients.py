"""aiokafka clients configured the rollstream way, from one KafkaSettings."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    IllegalStateError,
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
)
from aiokafka.structs import ConsumerRecord, TopicPartition

from rollstream.errors import BrokerError, ConfigurationError
from rollstream.kafka.parts import Joiner
from rollstream.schemas.topics import MAX_MESSAGE_BYTES
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)

#: What every producer keeps, transactional or not: a write is acknowledged once every in-sync
#: replica has it (at least ``min.insync.replicas``), and a retried send is never duplicated.
DURABILITY: dict[str, Any] = {"acks": "all", "enable_idempotence": True}


def make_producer(settings: KafkaSettings, **overrides: Any) -> AIOKafkaProducer:
    """An idempotent, zstd-compressing producer that accepts records up to 16 MiB.

    aiokafka checks a record's uncompressed size against ``max_request_size``, so it is raised
    together with the topics' ``max.message.bytes``. ``overrides`` may tune anything but
    ``DURABILITY``: weakening it raises ``ConfigurationError``.
    """
    weakened = {
        k: v
        for k, v in overrides.items()
        if k in DURABILITY and v != DURABILITY[k] and not (k == "acks" and v == -1)
    }
    if weakened:
        raise ConfigurationError(f"producers keep {DURABILITY}; refusing {weakened}")
    kwargs: dict[str, Any] = (
        settings.client_kwargs()
        | DURABILITY
        | {
            "compression_type": "zstd",
            "max_request_size": MAX_MESSAGE_BYTES,
            "linger_ms": 5,
        }
    )
    return AIOKafkaProducer(**(kwargs | overrides))


class Consumer(AIOKafkaConsumer):  # type: ignore[misc]
    """aiokafka's consumer: parts joined, a rebalance listener's failure raised.

    Records carried as parts are joined (``rollstream.kafka.parts``). A seek drops what waits
    for parts in the partitions sought: they are read again. aiokafka logs and swallows what a
    rebalance listener raises, which would leave partitions assigned but never placed (read
    from the wrong offset, or by a member that never took them): the first such failure is kept
    and every later poll raises it, non-retriable (restart the consumer; the group gives its
    partitions to the members that are well).
    """

    def __init__(self, *topics: str, **kwargs: Any) -> None:
        super().__init__(*topics, **kwargs)
        self.joiner = Joiner()
        self._joined: list[ConsumerRecord] = []
        self._group = kwargs.get("group_id")
        self.listener_failure: BaseException | None = None

    def _raise_listener_failure(self) -> None:
        failure = self.listener_failure
        if failure is not None:
            raise BrokerError(
                f"consumer group {self._group}: its rebalance listener failed ({failure}); "
                "restart the consumer (reading on would start its partitions in the wrong place)",
                retriable=False,
            ) from failure

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """As aiokafka's, parts joined: records behind a whole still in parts wait for it."""
        self._raise_listener_failure()
        polled = await super().getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records)
        self._raise_listener_failure()  # a rebalance during the poll: these are not to be read
        return self.joiner.join(polled)

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """As aiokafka's, parts joined."""
        self._raise_listener_failure()
        while not self._joined:
            message = await super().getone(*partitions)
            self._raise_listener_failure()
            tp = TopicPartition(message.topic, message.partition)
            self._joined += self.joiner.join({tp: [message]}).get(tp, [])
        return self._joined.pop(0)

    async def stop(self) -> None:
        """As aiokafka's, without the cancellation of its own fetches escaping it.

        aiokafka's fetcher cancels its pending fetches on close and awaits them, so a stop
        while one waits (a fetch in retry backoff) raises their CancelledError (aiokafka#647):
        the caller's stop would then look cancelled when nothing cancelled it. A cancellation
        of the task calling stop still propagates.
        """
        try:
            await super().stop()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # aiokafka's stop ended at that fetch: the other fetches and the connections are
            # closed here instead (or they leak).
            pending = list(self._fetcher._pending_tasks) if self._fetcher else []
            for fetch in pending:
                fetch.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self._client.close()
            log.info("consumer group %s: fetches cancelled by the stop were dropped", self._group)

    def subscribe(
        self,
        topics: Sequence[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """As aiokafka's, with the listener wrapped (see the class).

        A revoked partition's records waiting for parts are dropped first, and what
        ``listener`` raises is raised by the next poll.
        """
        super().subscribe(topics=topics, pattern=pattern, listener=_Listener(self, listener))

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """As aiokafka's; what waited for parts in ``partition`` is dropped."""
        self._forget([partition])
        super().seek(partition, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """As aiokafka's; what waited for parts there is dropped."""
        self._forget(partitions or None)
        await super().seek_to_beginning(*partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """As aiokafka's; what waited for parts there is dropped."""
        self._forget(partitions or None)
        await super().seek_to_end(*partitions)

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int]:
        """As aiokafka's; what waited for parts there is dropped."""
        self._forget(partitions or None)
        committed: dict[TopicPartition, int] = await super().seek_to_committed(*partitions)
        return committed

    def _forget(self, partitions: Sequence[TopicPartition] | None) -> None:
        self.joiner.forget(partitions)
        if partitions is None:
            self._joined.clear()
        else:
            kept = set(partitions)
            self._joined = [
                m for m in self._joined if TopicPartition(m.topic, m.partition) not in kept
            ]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """The caller's listener, its failure kept for the consumer's next poll.

    The one place that works around aiokafka swallowing listener errors; revoked partitions'
    records waiting for parts are dropped before the caller's listener runs.
    """

    def __init__(self, consumer: Consumer, inner: ConsumerRebalanceListener | None) -> None:
        self.consumer, self.inner = consumer, inner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.consumer._forget(list(revoked))
        await self._call("on_partitions_revoked", revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self._call("on_partitions_assigned", assigned)

    async def _call(self, name: str, partitions: list[TopicPartition]) -> None:
        if self.inner is None:
            return
        try:
            done = getattr(self.inner, name)(partitions)
            if inspect.isawaitable(done):
                await done
        except Exception as exc:
            log.exception("consumer group %s: %s failed", self.consumer._group, name)
            if self.consumer.listener_failure is None:
                self.consumer.listener_failure = exc


def make_consumer(
    settings: KafkaSettings, *topics: str, group_id: str | None = None, **overrides: Any
) -> Consumer:
    """A consumer that reads committed data only, commits offsets explicitly, joins parts."""
    kwargs: dict[str, Any] = settings.client_kwargs() | {
        "group_id": group_id,
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_partition_fetch_bytes": MAX_MESSAGE_BYTES,
        "fetch_max_bytes": 4 * MAX_MESSAGE_BYTES,
    }
    return Consumer(*topics, **(kwargs | overrides))


class _AdminClient(AIOKafkaAdminClient):  # type: ignore[misc]
    """aiokafka's admin client, asking another broker when the one it picked is down.

    The same for the controller its metadata names (see ``_send_to_controller``).

    aiokafka sends most admin requests to a broker picked at random from its metadata, which
    names a broker that just went down until the next refresh: one broker down then fails a
    third of the calls with a retriable connection error, though two brokers could answer.
    """

    async def _send_request(self, request: Any, node_id: int | None = None) -> Any:
        if node_id is not None:
            return await super()._send_request(request, node_id)
        for attempt in range(_ADMIN_ATTEMPTS):
            try:
                return await super()._send_request(request)
            except (NodeNotReadyError, KafkaConnectionError, RequestTimedOutError):
                if attempt == _ADMIN_ATTEMPTS - 1:
                    raise
                self._client.force_metadata_update()
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def _send_to_controller(self, request: Any) -> Any:
        # aiokafka sends topic changes to the controller its metadata named and waits for
        # that node for a whole request timeout, then fails. Under KRaft that is any live
        # broker, named by the metadata of the moment: one killed since is asked again and
        # again. A controller that takes no connection is looked up afresh instead.
        for _ in range(_ADMIN_ATTEMPTS - 1):
            controller = self._client.cluster.controller
            if controller is not None and await self._client.ready(controller.nodeId):
                break
            await self._client.force_metadata_update()
            await asyncio.sleep(0.2)
        return await super()._send_to_controller(request)


_ADMIN_ATTEMPTS = 10


def make_admin(settings: KafkaSettings, **overrides: Any) -> AIOKafkaAdminClient:
    """An admin client for topic management (another broker is asked if one is down)."""
    return _AdminClient(**(settings.client_kwargs() | overrides))


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition] | None:
    """The partitions of ``topic`` from fresh cluster metadata; None if there is no such topic.

    ``AIOKafkaConsumer.partitions_for_topic`` only knows topics the consumer already tracks and
    ``topics()`` discards the partitions it fetched, so this asks the client for the metadata.
    """
    cluster = await consumer._client.fetch_all_metadata()
    partitions = cluster.partitions_for_topic(topic)
    if partitions is None:
        return None
    return [TopicPartition(topic, p) for p in sorted(partitions)]


async def behind(consumer: AIOKafkaConsumer, end: dict[TopicPartition, int]) -> bool:
    """Whether the consumer's position is short of ``end`` on any of its partitions."""
    for tp, offset in end.items():
        if await consumer.position(tp) < offset:
            return True
    return False


async def caught_up(consumer: AIOKafkaConsumer, tp: TopicPartition) -> bool:
    """Whether ``tp`` was read to its end (the last stable offset, under read_committed)."""
    if tp not in consumer.assignment():
        return False  # revoked meanwhile (the offsets below assert on it)
    end = consumer.last_stable_offset(tp)
    if end is None or end < 0:
        end = consumer.highwater(tp)
    if end is None:
        return False  # not fetched yet
    try:
        return bool(await consumer.position(tp) >= end)
    except IllegalStateError:
        return False  # revoked meanwhile


async def seek_to_committed(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
    """Move each of ``tps`` still assigned back to the group's committed offset (or the start)."""
    for tp in tps:
        if tp not in consumer.assignment():
            continue
        try:
            committed = await consumer.committed(tp)
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
        except IllegalStateError:
            continue  # reassigned meanwhile: its next owner starts from the committed offset


#: Per loop: how many ordinary_tasks() blocks are open, and the factory to restore after the last.
_suspended: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, Any]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.contextmanager
def ordinary_tasks() -> Iterator[None]:
    """Suspend an eager task factory on the running loop while a Kafka client starts.

    mitmproxy runs its master with ``asyncio.eager_task_factory`` on the whole loop; aiokafka's
    group coordinator starts its routine task in ``__init__`` before the attributes that routine
    reads exist, which only works when tasks start later. A process hosting both (the tests,
    an all-in-one stack) starts its consumers inside this. Blocks may overlap (two clients
    starting concurrently): the factory comes back when the last one ends, not the first.
    """
    loop = asyncio.get_running_loop()
    depth, saved = _suspended.get(loop, (0, None))
    current = loop.get_task_factory()
    if current is not None:
        # Also when a block is already open: the factory may have been set since it began
        # (mitmproxy installs it when its master starts running).
        saved = current
        loop.set_task_factory(None)
    _suspended[loop] = (depth + 1, saved)
    try:
        yield
    finally:
        depth, saved = _suspended[loop]
        if depth == 1:
            del _suspended[loop]
            if loop.get_task_factory() is None:
                loop.set_task_factory(saved)
        else:
            _suspended[loop] = (depth - 1, saved)


class LazyProducer:
    """A producer started at its first use, shared by all later records of its sender.

    For senders that may never send (dead letters, task submissions); a failed start is
    retried at the next use. ``get()`` waits at most ``start_timeout_s`` for the start;
    ``close()`` stops it (the next ``get()`` makes a new one: how a sender recovers from a
    producer that failed).
    """

    def __init__(self, settings: KafkaSettings, start_timeout_s: float) -> None:
        self.settings = settings
        self.start_timeout_s = start_timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._starting = asyncio.Lock()

    async def get(self) -> AIOKafkaProducer:
        """The started producer (started now if it was not)."""
        async with self._starting:
            if self._producer is None:
                producer = make_producer(self.settings)
                try:
                    with ordinary_tasks():
                        await asyncio.wait_for(producer.start(), self.start_timeout_s)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await producer.stop()
                    raise
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        """Stop the producer, if one was started."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()
