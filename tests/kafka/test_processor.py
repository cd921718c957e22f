"""The transactional processor against the real broker: transactions per partition, state,
dead letters by the error's retriable flag, and an expelled member fenced mid-transaction."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from aiokafka.structs import TopicPartition

from rollstream.errors import BrokerError
from rollstream.kafka.batches import Transaction
from rollstream.kafka.partition_producer import PartitionProducer
from rollstream.schemas import AvroSerializer, DeadLetter, PolicyVersion, TopicNames, utcnow
from rollstream.schemas.serializer import MAGIC
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory, TopicFactory
from tests.kafka.echo import Echo, processor
from tests.kafka_reading import read_records
from tests.waiting import until

REPO = Path(__file__).resolve().parents[2]


async def _send(producer: AIOKafkaProducer, topic: str, versions: range, partitions: int) -> None:
    serializer = AvroSerializer()
    for v in versions:
        record = PolicyVersion(version=v, published_at=utcnow(), publisher=f"p{v}")
        await producer.send_and_wait(
            topic, serializer.encode(record), key=b"%d" % v, partition=v % partitions
        )


async def _spec(
    kafka_settings: KafkaSettings, topics: TopicNames, topic_factory: TopicFactory, **extra: Any
) -> dict[str, Any]:
    return {
        "bootstrap": kafka_settings.bootstrap_servers,
        "input": await topic_factory(partitions=2),
        "output": await topic_factory(partitions=1),
        "deadletters": topics.deadletters,
        "state": topics.state,
        "group": f"{kafka_settings.topic_prefix}-echo",
        **extra,
    }


def test_the_transactional_id_is_per_input_partition_and_shared_by_every_member() -> None:
    kafka = KafkaSettings()
    spec = {"input": "in", "group": "g", "deadletters": "d", "state": "s"}
    first = processor(kafka, Echo("out", "a"), spec)
    second = processor(kafka, Echo("out", "b"), spec)
    tp0, tp1 = TopicPartition("in", 0), TopicPartition("in", 1)
    assert first.transactional_id(tp0) == second.transactional_id(tp0) == "g-in-0"
    assert first.transactional_id(tp1) != first.transactional_id(tp0)


async def test_outputs_dead_letters_state_and_offsets_commit_together_and_a_restart_resumes(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
) -> None:
    spec = await _spec(kafka_settings, rollstream_topics, topic_factory)
    producer = await producer_factory()
    await _send(producer, spec["input"], range(10), 2)
    await producer.send_and_wait(spec["input"], b"not avro", key=b"bad", partition=0)

    first = Echo(spec["output"], "first")
    async with processor(kafka_settings, first, spec) as member:
        stop = asyncio.Event()
        running = asyncio.create_task(member.run(stop))
        await until(lambda: first.outputs == 10 and member.metrics.dead_letters == 1, 60, "10+1")
        stop.set()
        await running
    await _send(producer, spec["input"], range(10, 15), 2)

    second = Echo(spec["output"], "second")
    async with processor(kafka_settings, second, spec) as member:
        stop = asyncio.Event()
        running = asyncio.create_task(member.run(stop))
        await until(lambda: second.outputs == 5, 60, "the five new records")
        stop.set()
        await running
    # The second member started from each partition's committed offset and state.
    seen = {
        tp.partition: ((s or {}).get("count"), offset) for tp, (s, offset) in second.seen.items()
    }
    assert seen == {0: (5, 6), 1: (5, 5)}  # partition 0: five versions and the bad record
    copies = await read_records(kafka_settings, spec["output"], PolicyVersion, 15, settle_s=1.0)
    assert sorted(c.version for c in copies) == list(range(15))
    letters = await read_records(kafka_settings, spec["deadletters"], DeadLetter, 1, settle_s=0.5)
    assert [(d.error_type, d.retriable, d.offset) for d in letters] == [
        ("SerializationError", False, 5)
    ]


async def test_a_retriable_error_is_retried_then_dead_lettered_with_its_flag(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
) -> None:
    """A writer schema nobody published stays unknown: retried after a refresh of the store,
    then dead-lettered as retriable, and the records after it flow on."""
    spec = await _spec(kafka_settings, rollstream_topics, topic_factory)
    producer = await producer_factory()
    unknown = MAGIC + bytes(range(8)) + b"\x02"
    for _ in range(4):
        await producer.send_and_wait(spec["input"], unknown, key=b"u", partition=0)
    await _send(producer, spec["input"], range(2), 1)
    echo = Echo(spec["output"], "only")
    async with processor(kafka_settings, echo, spec) as member:
        stop = asyncio.Event()
        running = asyncio.create_task(member.run(stop))
        await until(lambda: echo.outputs == 2 and member.metrics.dead_letters == 4, 60, "2+4")
        stop.set()
        await running
        # A refresh per poll that needs one, not per record (the store is read whole each time).
        assert 1 <= member.metrics.schema_refreshes < 4
    letters = await read_records(kafka_settings, spec["deadletters"], DeadLetter, 4, settle_s=0.5)
    assert [(d.error_type, d.retriable) for d in letters] == [("UnknownSchemaError", True)] * 4


async def test_an_expelled_member_is_fenced_and_its_work_never_commits(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    """The first member's event loop stalls mid-batch past its session timeout (a long pause):
    the group gives its partitions to the second member, which processes everything. When the
    first wakes it commits the batch it held, unaware: its producer was fenced by the second's,
    so nothing of it reaches a reader and every record is copied exactly once (with one
    transactional id per member rather than per partition, the first's copies commit too)."""
    marker, result = tmp_path / "holding", tmp_path / "result.json"
    spec = await _spec(
        kafka_settings,
        rollstream_topics,
        topic_factory,
        consumer={"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000},
    )
    producer = await producer_factory()
    await _send(producer, spec["input"], range(20), 2)
    await _send(producer, spec["input"], range(20, 21), 1)  # p20 on partition 0: the stall
    first_spec = spec | {
        "name": "first",
        "hold_on": "p20",
        "hold_s": 25.0,
        "marker": str(marker),
        "result": str(result),
    }
    env = os.environ | {"PYTHONPATH": str(REPO)}
    log = tmp_path / "first.log"
    with log.open("w") as stderr:
        first = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.kafka.echo",
            json.dumps(first_spec),
            cwd=REPO,
            env=env,
            stderr=stderr,
        )
    second = Echo(spec["output"], "second")
    try:
        await until(marker.exists, 60, "the first member holding its batch")
        async with processor(kafka_settings, second, spec) as member:
            stop = asyncio.Event()
            running = asyncio.create_task(member.run(stop))
            # The first is expelled; the second gets both partitions and copies the rest.
            await until(lambda: 20 in second.copied, 60, "the second member's copy of p20")
            # The first wakes (25 s after it stalled), commits its batch, and is fenced.
            await until(lambda: "fenced on" in log.read_text(), 60, "the first member fenced")
            first.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(first.wait(), 60) == 0, log.read_text()
            stop.set()
            await running
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    outcome = json.loads(result.read_text())
    assert outcome["fenced"] >= 1
    copies = await read_records(kafka_settings, spec["output"], PolicyVersion, 21, settle_s=3.0)
    counts = collections.Counter(c.version for c in copies)
    assert sorted(counts) == list(range(21)) and max(counts.values()) == 1, counts
    assert outcome["outputs"] + second.outputs == 21
    assert [c.publisher for c in copies if c.version == 20] == ["second"]


async def test_a_failure_taking_partitions_stops_the_run_instead_of_idling_on_them(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    topic_factory: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka swallows what a rebalance listener raises: without the processor keeping it,
    the partitions would stay assigned, never processed, and nothing would say so."""
    spec = await _spec(kafka_settings, rollstream_topics, topic_factory)

    async def unreadable(*args: object) -> dict[TopicPartition, dict[str, Any]]:
        raise RuntimeError("state topic unreadable")

    monkeypatch.setattr("rollstream.kafka.partition_producer.load_states", unreadable)
    async with processor(kafka_settings, Echo(spec["output"], "only"), spec) as member:
        with pytest.raises(BrokerError, match="state topic unreadable") as raised:
            async with asyncio.timeout(60):
                await member.run(asyncio.Event())
        assert not raised.value.retriable  # a restart of the member, not a retry


async def test_a_producer_that_loses_its_broker_mid_transaction_is_replaced_not_fatal(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partition 0's first transaction sends its outputs, then loses its connection before its
    offsets (as when a cluster's leader dies under the coordinator lookup): aborted. The member
    takes the partition afresh (new producer, committed state and offset) and goes on; every
    record is copied once and the state counts each once (before: the run stopped)."""
    spec = await _spec(kafka_settings, rollstream_topics, topic_factory)
    producer = await producer_factory()
    await _send(producer, spec["input"], range(10), 2)
    real_commit = PartitionProducer._commit
    lost: list[TopicPartition] = []

    async def losing(self: PartitionProducer, transaction: Transaction, states: list[Any]) -> None:
        if self.tp.partition == 0 and not lost:
            lost.append(self.tp)
            async with self.producer.transaction():
                for output in transaction.outputs:
                    await self.producer.send(output.topic, output.value, key=output.key)
                raise KafkaConnectionError("Connection at 127.0.0.1:9 closed")
        await real_commit(self, transaction, states)

    monkeypatch.setattr(PartitionProducer, "_commit", losing)
    echo = Echo(spec["output"], "only")
    async with processor(kafka_settings, echo, spec) as member:
        stop = asyncio.Event()
        running = asyncio.create_task(member.run(stop))
        await until(lambda: echo.outputs == 10 or running.done(), 60, "ten copies")
        stop.set()
        await running  # it did not stop on the lost connection
        assert lost and member.metrics.retaken == 1
        tp0 = TopicPartition(spec["input"], 0)
        assert echo.states[tp0] == {"count": 5}  # the aborted batch's count was dropped
    copies = await read_records(kafka_settings, spec["output"], PolicyVersion, 10, settle_s=1.0)
    counts = collections.Counter(c.version for c in copies)
    assert sorted(counts) == list(range(10)) and max(counts.values()) == 1, counts
