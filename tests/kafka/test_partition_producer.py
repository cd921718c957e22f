"""A partition producer's failures: a fencing is an ownership change, a broker out of reach is
worth a fresh producer, and a broker's refusal is neither.

aiokafka ends a transactional producer's sender task on a fencing, a transactional id the ACLs
no longer allow, a broken sequence or an unexpected broker answer, and then fails the open
transaction's calls with errors of their own. Here a real (unstarted) aiokafka producer is put
in that state with each cause; the commit must name the cause, and say "fenced" only for a
fencing (before: every fatal error was reported as fencing, an ACL refusal as a handover), and
"broken" (retriable) for a connection lost (before: a stop of the whole processor, seen in CI
when a cluster's leader was killed while a producer looked up its group coordinator).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerEpoch,
    KafkaConnectionError,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.structs import TopicPartition

from rollstream.kafka.batches import Transaction
from rollstream.kafka.partition_producer import (
    PartitionProducer,
    ProducerBroken,
    ProducerFailed,
    is_fencing,
    is_transient,
)
from rollstream.kafka.state import (
    assemble_state,
    chunk_key,
    encode_state,
    state_key,
    state_records,
)
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings

UnstartedProducer = Callable[..., PartitionProducer]


@pytest.fixture
def unstarted_producer() -> UnstartedProducer:
    """A factory of partition producers on a broker nobody listens on (none is started here:
    each test drives the transaction's failure itself); keyword arguments override."""

    def make(**overrides: Any) -> PartitionProducer:
        options: dict[str, Any] = {
            "group_id": "rollstream-reconstruct",
            "serializer": AvroSerializer(),
            "dead_letter_topic": "rollstream.dead-letters",
            "state_topic": None,
        } | overrides
        transactional_id = options.pop("transactional_id", "rollstream-reconstruct-x-events-0")
        return PartitionProducer(
            KafkaSettings(bootstrap_servers="127.0.0.1:1"),
            TopicPartition("rollstream.events", 0),
            transactional_id,
            **options,
        )

    return make


def _unexpected(cause: BaseException) -> KafkaError:
    error = KafkaError("Unexpected error during batch delivery")  # as aiokafka's sender wraps
    error.__cause__ = cause
    return error


def _lookup_lost() -> KafkaError:
    """What aiokafka's sender ends with when a coordinator lookup loses its connection."""
    lost = KafkaConnectionError("Connection at 127.0.0.1:29193 closed")
    wrapped = KafkaError(repr(lost))
    wrapped.__cause__ = lost
    return _unexpected(wrapped)


FENCINGS = [ProducerFenced(), InvalidProducerEpoch(), _unexpected(ProducerFenced())]
OTHERS = [
    TransactionalIdAuthorizationFailed("rollstream-reconstruct-x-events-0"),
    OutOfOrderSequenceNumber(),
    _unexpected(GroupAuthorizationFailedError("rollstream-reconstruct")),
]
LOST = [_lookup_lost(), _unexpected(KafkaConnectionError("reset"))]


def _expected(cause: BaseException) -> type[Exception]:
    if cause in FENCINGS:
        return ProducerFenced  # type: ignore[no-any-return]  # aiokafka is untyped
    return ProducerBroken if cause in LOST else ProducerFailed


@pytest.mark.parametrize("cause", FENCINGS + OTHERS + LOST, ids=repr)
async def test_only_a_fencing_is_reported_as_one(
    cause: BaseException,
    monkeypatch: pytest.MonkeyPatch,
    unstarted_producer: UnstartedProducer,
) -> None:
    producer = unstarted_producer()
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
    expected = _expected(cause)
    try:
        with pytest.raises(expected) as raised:
            await producer.commit(Transaction(offset=1))
    finally:
        await producer.stop()
    if expected is not ProducerFenced:
        assert type(cause).__name__ in str(raised.value)
        assert getattr(raised.value, "retriable", None) == (expected is ProducerBroken)
        assert raised.value.__cause__ is cause
    assert is_fencing(cause) == (cause in FENCINGS)
    assert is_transient(cause) == (cause in LOST)


async def test_a_connection_lost_inside_a_transaction_is_a_broken_producer(
    monkeypatch: pytest.MonkeyPatch, unstarted_producer: UnstartedProducer
) -> None:
    """Not only once the sender ended: a transaction call that lost its broker while the
    producer lives is retriable too (and a non-Kafka error stays what it was)."""
    producer = unstarted_producer()
    raised: list[BaseException] = [KafkaConnectionError("closed"), ValueError("a bug")]

    async def commit(*_: object) -> None:
        raise raised[0]

    monkeypatch.setattr(producer, "_commit", commit)
    try:
        with pytest.raises(ProducerBroken, match="lost its broker: KafkaConnectionError"):
            await producer.commit(Transaction(offset=1))
        raised.pop(0)
        with pytest.raises(ValueError, match="a bug"):
            await producer.commit(Transaction(offset=1))
    finally:
        await producer.stop()


@pytest.mark.parametrize("older", [True, False], ids=["older-layout", "today"])
async def test_the_next_state_after_a_resume_makes_the_topic_hold_it(
    older: bool, monkeypatch: pytest.MonkeyPatch, unstarted_producer: UnstartedProducer
) -> None:
    """Whichever layout the partition's last state had, the first state its new owner writes
    reads back whole: after an older state, every entry is written (none was a record of its
    own) and its chunks are tombstoned; after today's, only what changed."""
    key = state_key("rollstream-reconstruct", TopicPartition("rollstream.events", 0))
    emitted = {f"s{i}": i for i in range(6)}
    latest: dict[bytes, bytes] = {}
    if older:
        latest[key] = encode_state(
            {"committed": 0, "emitted": dict(list(emitted.items())[:3])} | {"chunks": 2}
        )
        latest[chunk_key(key, 1)] = encode_state({"emitted": dict(list(emitted.items())[3:])})
    else:
        for record_key, value in state_records(key, {"committed": 0, "emitted": emitted}):
            assert value is not None
            latest[record_key] = value
    producer = unstarted_producer(
        transactional_id="rollstream-reconstruct-events-0", state_topic="rollstream.state"
    )
    producer.resume(assemble_state(key, latest))
    sent: list[list[tuple[bytes, bytes | None]]] = []

    async def commit(transaction: Transaction, states: list[tuple[bytes, bytes | None]]) -> None:
        sent.append(states)

    monkeypatch.setattr(producer, "_commit", commit)
    later = {"committed": 2, "emitted": {k: v for k, v in emitted.items() if v >= 2} | {"s9": 9}}
    try:
        await producer.commit(Transaction(offset=10, state=later))
    finally:
        await producer.stop()
    [records] = sent
    for record_key, value in records:
        if value is None:
            latest.pop(record_key, None)
        else:
            latest[record_key] = value
    assert assemble_state(key, latest) == later
    entries = [k for k, v in records if v is not None and k != key]
    assert len(entries) == (5 if older else 1)  # s2..s5 and s9, or s9 alone
