"""A partition producer's fatal failures: fencing is an ownership change, nothing else is.

aiokafka ends a transactional producer's sender task on a fencing, a transactional id the ACLs
no longer allow, a broken sequence or an unexpected broker answer, and then fails the open
transaction's calls with errors of their own. Here a real (unstarted) aiokafka producer is put
in that state with each cause; the commit must name the cause, and say "fenced" only for a
fencing (before: every fatal error was reported as fencing, an ACL refusal as a handover).
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerEpoch,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.structs import TopicPartition

from rollstream.kafka.batches import Transaction
from rollstream.kafka.partition_producer import PartitionProducer, ProducerFailed, is_fencing
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings


def _unexpected(cause: BaseException) -> KafkaError:
    error = KafkaError("Unexpected error during batch delivery")  # as aiokafka's sender wraps
    error.__cause__ = cause
    return error


FENCINGS = [ProducerFenced(), InvalidProducerEpoch(), _unexpected(ProducerFenced())]
OTHERS = [
    TransactionalIdAuthorizationFailed("rollstream-reconstruct-x-events-0"),
    OutOfOrderSequenceNumber(),
    _unexpected(GroupAuthorizationFailedError("rollstream-reconstruct")),
]


@pytest.mark.parametrize("cause", FENCINGS + OTHERS, ids=repr)
async def test_only_a_fencing_is_reported_as_one(
    cause: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = PartitionProducer(
        KafkaSettings(bootstrap_servers="127.0.0.1:1"),
        TopicPartition("rollstream.events", 0),
        "rollstream-reconstruct-x-events-0",
        group_id="rollstream-reconstruct",
        serializer=AvroSerializer(),
        dead_letter_topic="rollstream.dead-letters",
        state_topic=None,
    )
    inner = producer.producer

    async def sender_routine() -> None:
        raise cause

    task = asyncio.ensure_future(sender_routine())
    await asyncio.wait([task])
    txn = inner._txn_manager
    txn.set_pid_and_epoch(7, 0)  # as InitProducerId leaves it
    txn.begin_transaction()
    inner._sender._sender_task = task  # the sender ended with the cause: aiokafka's callback
    inner._sender._fail_all(task)
    assert txn.is_fatal_error()

    async def commit(*_: object) -> None:  # the open transaction's call, failed after it
        raise IllegalStateError("Sender is not running")

    monkeypatch.setattr(producer, "_commit", commit)
    expected = ProducerFenced if is_fencing(cause) else ProducerFailed
    try:
        with pytest.raises(expected) as raised:
            await producer.commit(Transaction(offset=1))
    finally:
        await producer.stop()
    if expected is ProducerFailed:
        assert type(cause).__name__ in str(raised.value) and not raised.value.retriable
        assert raised.value.__cause__ is cause
    assert is_fencing(cause) == (cause in FENCINGS)
