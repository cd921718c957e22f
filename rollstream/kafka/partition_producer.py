"""The transactional producer of one input partition, for the transactional processor.

Its transactional id belongs to the partition (``<prefix>-<topic>-<partition>``), so whichever
member starts it fences the partition's previous owner (see ``rollstream.kafka.processor``).
It also remembers how many records the partition's state took last time, so chunks a smaller
state no longer needs get their tombstones.
"""

from __future__ import annotations

import contextlib
from typing import Any

from aiokafka.errors import InvalidProducerEpoch, ProducerFenced
from aiokafka.structs import TopicPartition

from rollstream.errors import BrokerError
from rollstream.kafka.batches import Transaction
from rollstream.kafka.clients import make_producer
from rollstream.kafka.state import state_key, state_records
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings


class ProducerFailed(BrokerError):
    """A partition's transactional producer failed for good, for a reason other than fencing.

    Not retriable as such: an ACL refusal (a transactional id no longer authorised) needs an
    operator; the processor stops with it, naming the cause, and a restart re-reads the input.
    """

    retriable = False


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
        self.state_chunks = 0  # records of the partition's last state
        self.producer = make_producer(kafka, transactional_id=transactional_id, linger_ms=20)

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
            states = state_records(key, transaction.state, self.state_chunks)
        try:
            await self._commit(transaction, states)
        except Exception as exc:
            # Once its producer failed for good, aiokafka fails the transaction's other calls
            # with other errors (a send "not in transaction"): the cause is what ended its
            # sender. Only a fencing is another member's ownership; an ACL refusal or a broken
            # sequence must not pass for one (logged as a normal handover, cause lost).
            txn_manager = getattr(self.producer, "_txn_manager", None)
            if txn_manager is None or not txn_manager.is_fatal_error():
                raise
            cause = fatal_cause(self.producer) or exc
            if is_fencing(cause):
                raise ProducerFenced() from exc
            raise ProducerFailed(
                f"the transactional producer of {self.tp.topic}[{self.tp.partition}] failed "
                f"for good: {type(cause).__name__}: {cause}"
            ) from cause
        if states:
            self.state_chunks = sum(value is not None for _, value in states)

    async def _commit(
        self, transaction: Transaction, states: list[tuple[bytes, bytes | None]]
    ) -> None:
        producer = self.producer
        async with producer.transaction():
            for output in transaction.outputs:
                await producer.send(output.topic, output.value, key=output.key)
            for letter in transaction.dead:
                value = self.serializer.encode(letter)
                await producer.send(self.dead_letter_topic, value, key=letter.key)
            for record_key, state in states:
                assert self.state_topic is not None
                await producer.send(self.state_topic, state, key=record_key)
            if transaction.offset is not None:
                offsets = {self.tp: transaction.offset}
                await producer.send_offsets_to_transaction(offsets, self.group_id)
