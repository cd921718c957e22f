"""The transactional producer of one input partition, for the transactional processor.

Its transactional id belongs to the partition (``<prefix>-<topic>-<partition>``), so whichever
member starts it fences the partition's previous owner (see ``rollstream.kafka.processor``).
It also remembers what the state topic holds of the partition's last state, so each state
writes only its changes (see ``rollstream.kafka.state``). Its failures are told apart here: a
fencing (another member owns the partition), a broker out of reach (``ProducerBroken``: the
partition is taken afresh) and a broker's refusal (``ProducerFailed``: an operator's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import (
    BrokerResponseError,
    InvalidProducerEpoch,
    KafkaError,
    KafkaTimeoutError,
    ProducerFenced,
)
from aiokafka.structs import TopicPartition

from rollstream.errors import BrokerError
from rollstream.kafka.batches import Transaction
from rollstream.kafka.clients import make_producer
from rollstream.kafka.state import load_states, state_key, state_records
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)

#: Tries at an operation that meets a broker out of reach, and the wait before the first retry
#: (doubled each time): about half a minute for a cluster to move a coordinator or a leader.
RETRY_ATTEMPTS = 6
RETRY_BACKOFF_S = 0.5


class ProducerFailed(BrokerError):
    """A partition's transactional producer failed for good, for a reason other than fencing.

    Not retriable as such: an ACL refusal (a transactional id no longer authorised) needs an
    operator; the processor stops with it, naming the cause, and a restart re-reads the input.
    """

    retriable = False


class ProducerBroken(BrokerError):
    """A partition's producer broke on a broker it could not reach; its transaction did not commit.

    Retriable: nothing of the transaction is visible, and a fresh producer for the partition
    (whose ``InitProducerId`` settles whatever the broken one left open) can go on from the
    partition's committed state and offset. The processor takes the partition afresh.
    """

    retriable = True


def fatal_cause(producer: Any) -> BaseException | None:
    """What ended an aiokafka producer's sender task (its fatal error), if it has ended."""
    task = getattr(getattr(producer, "_sender", None), "sender_task", None)
    if task is None or not task.done() or task.cancelled():
        return None
    cause: BaseException | None = task.exception()
    return cause


def is_fencing(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from) says another producer took the id."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ProducerFenced | InvalidProducerEpoch):
            return True
        seen = seen.__cause__
    return False


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is a broker out of reach, not a broker's refusal.

    Transient: somewhere in its causes a connection lost, a leader or coordinator moved, a
    timeout (aiokafka wraps a connection lost while it looks up a coordinator into the
    "Unexpected error during batch delivery" that ends its sender). Not transient if any cause
    is an answer the broker gave that retrying will not change (an ACL refusal, a fencing, a
    broken sequence).
    """
    transient = False
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, BrokerResponseError) and not seen.retriable:
            return False
        if isinstance(seen, KafkaTimeoutError | TimeoutError | ConnectionError) or (
            isinstance(seen, KafkaError) and seen.retriable
        ):
            transient = True
        seen = seen.__cause__
    return transient


async def retry_transient(
    operation: Callable[[], Awaitable[None]],
    what: str,
    attempts: int = RETRY_ATTEMPTS,
    backoff_s: float = RETRY_BACKOFF_S,
) -> None:
    """``operation`` again while it fails transiently (see :func:`is_transient`), then raise."""
    wait = backoff_s
    for attempt in range(1, attempts + 1):
        try:
            await operation()
            return
        except Exception as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            log.warning("%s failed (%s: %s); again in %.1f s", what, type(exc).__name__, exc, wait)
        await asyncio.sleep(wait)
        wait *= 2


class PartitionProducer:
    """One input partition's producer: its transactions and its state records."""

    def __init__(
        self,
        kafka: KafkaSettings,
        tp: TopicPartition,
        transactional_id: str,
        *,
        group_id: str,
        serializer: AvroSerializer,
        dead_letter_topic: str,
        state_topic: str | None,
    ) -> None:
        self.tp = tp
        self.group_id = group_id
        self.serializer = serializer
        self.dead_letter_topic = dead_letter_topic
        self.state_topic = state_topic
        # What the topic holds of the partition's last state: its emitted entries (only the
        # changes are written) and the records of an older layout's state (tombstoned).
        self.state_written: dict[str, int] = {}
        self.state_chunks = 0
        self.producer = make_producer(kafka, transactional_id=transactional_id, linger_ms=20)

    def resume(self, state: dict[str, Any] | None) -> None:
        """The partition's last state as read (None: never written): the next is its change.

        A state of the older layout (its ``chunks``) has no entry records on the topic: the
        next state writes all of its entries, and tombstones those chunks.
        """
        state = state or {}
        older = "chunks" in state
        self.state_written = {} if older else dict(state.get("emitted") or {})
        self.state_chunks = int(state["chunks"]) if older else 0

    async def start(self) -> None:
        """Start the producer: its InitProducerId fences the partition's previous owner."""
        await self.producer.start()

    async def stop(self) -> None:
        """Close the producer (a transaction it holds open is aborted by the broker)."""
        with contextlib.suppress(Exception):
            await self.producer.stop()

    async def commit(self, transaction: Transaction) -> None:
        """``transaction`` in one Kafka transaction: outputs, dead letters, state, offset."""
        states: list[tuple[bytes, bytes | None]] = []
        if transaction.state is not None and self.state_topic is not None:
            key = state_key(self.group_id, self.tp)
            states = state_records(key, transaction.state, self.state_written, self.state_chunks)
        try:
            await self._commit(transaction, states)
        except Exception as exc:
            # Once its producer failed for good, aiokafka fails the transaction's other calls
            # with other errors (a send "not in transaction"): the cause is what ended its
            # sender. Only a fencing is another member's ownership; a broker out of reach is
            # worth a fresh producer; an ACL refusal or a broken sequence needs an operator
            # and must pass for neither.
            txn_manager = getattr(self.producer, "_txn_manager", None)
            fatal = txn_manager is not None and txn_manager.is_fatal_error()
            cause = (fatal_cause(self.producer) or exc) if fatal else exc
            if fatal and is_fencing(cause):
                raise ProducerFenced() from exc
            if is_transient(cause):
                raise ProducerBroken(
                    f"the transactional producer of {self.tp.topic}[{self.tp.partition}] "
                    f"lost its broker: {type(cause).__name__}: {cause}"
                ) from cause
            if not fatal:
                raise
            raise ProducerFailed(
                f"the transactional producer of {self.tp.topic}[{self.tp.partition}] failed "
                f"for good: {type(cause).__name__}: {cause}"
            ) from cause
        if states and transaction.state is not None:
            self.state_written = dict(transaction.state.get("emitted") or {})
            self.state_chunks = 0

    async def _commit(
        self, transaction: Transaction, states: list[tuple[bytes, bytes | None]]
    ) -> None:
        producer = self.producer
        async with producer.transaction():
            for output in transaction.outputs:
                await producer.send(
                    output.topic, output.value, key=output.key, headers=list(output.headers) or None
                )
            for letter in transaction.dead:
                value = self.serializer.encode(letter)
                await producer.send(self.dead_letter_topic, value, key=letter.key)
            for record_key, state in states:
                assert self.state_topic is not None
                await producer.send(self.state_topic, state, key=record_key)
            if transaction.offset is not None:
                offsets = {self.tp: transaction.offset}
                await producer.send_offsets_to_transaction(offsets, self.group_id)


async def open_partitions(
    producers: dict[TopicPartition, PartitionProducer],
    consumer: AIOKafkaConsumer,
    kafka: KafkaSettings,
    state_topic: str | None,
    group_id: str,
) -> tuple[dict[TopicPartition, dict[str, Any]], dict[TopicPartition, int | None]]:
    """Start ``producers``, then read their partitions' states and committed offsets.

    Starting fences each partition's previous owner. On any failure every producer is
    stopped and the failure raised.
    """
    started = await asyncio.gather(*(p.start() for p in producers.values()), return_exceptions=True)
    failed = next((r for r in started if isinstance(r, BaseException)), None)
    try:
        if failed is not None:
            raise failed
        tps = list(producers)
        states: dict[TopicPartition, dict[str, Any]] = {}
        if state_topic is not None and tps:
            states = await load_states(kafka, state_topic, group_id, tps)
        # Read after the producers started: the previous owner is fenced by now, so this is
        # its last committed offset. aiokafka fetched a position before the assignment's
        # callback, possibly before that owner's last commit: the caller seeks to this one.
        committed = {tp: await consumer.committed(tp) for tp in tps}
    except BaseException:
        for producer in producers.values():
            await producer.stop()
        raise
    return states, committed
