"""Produce and consume through the real broker, including transactions and read_committed."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.structs import TopicPartition

from rollstream.errors import BrokerError
from rollstream.kafka.clients import make_consumer, ordinary_tasks
from rollstream.schemas import AvroSerializer, CallRecord, SessionStarted
from rollstream.schemas.topics import MAX_MESSAGE_BYTES
from rollstream.settings import KafkaSettings
from tests.conftest import ConsumerFactory, ProducerFactory, TopicFactory
from tests.schemas.samples import CALL, STARTED

pytestmark = pytest.mark.integration


async def _drain(consumer: AIOKafkaConsumer, n: int, timeout: float = 20.0) -> list[bytes]:
    got: list[bytes] = []
    async with asyncio.timeout(timeout):
        while len(got) < n:
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                got += [m.value for m in messages]
    # Nothing more should arrive.
    extra = await consumer.getmany(timeout_ms=500)
    return got + [m.value for ms in extra.values() for m in ms]


async def test_records_round_trip_with_keys_in_order(
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    topic = await topic_factory(partitions=3, configs={"compression.type": "zstd"})
    serializer = AvroSerializer()
    producer = await producer_factory()
    records = [CALL.model_copy(update={"seq": i, "call_id": f"c{i}"}) for i in range(20)]
    for record in records:
        await producer.send(topic, serializer.encode(record), key=b"sess-1")
    await producer.flush()
    consumer = await consumer_factory(topic)
    decoded = [serializer.decode(v) for v in await _drain(consumer, len(records))]
    assert decoded == records  # one key, one partition: order kept


async def test_a_record_near_16_mib_goes_through(
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    topic = await topic_factory(configs={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    producer = await producer_factory()
    payload = uuid.uuid4().bytes * (12 * 1024 * 1024 // 16)  # 12 MiB, poorly compressible
    await producer.send_and_wait(topic, payload, key=b"big")
    consumer = await consumer_factory(topic)
    assert await _drain(consumer, 1) == [payload]


async def test_read_committed_sees_committed_transactions_only(
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    topic = await topic_factory(partitions=2)
    producer = await producer_factory(transactional_id=f"tx-{uuid.uuid4().hex}")
    async with producer.transaction():
        await producer.send(topic, b"committed-1", key=b"k")
    await producer.begin_transaction()
    await producer.send(topic, b"aborted", key=b"k")
    await producer.abort_transaction()
    async with producer.transaction():
        await producer.send(topic, b"committed-2", key=b"k")

    committed = await consumer_factory(topic)
    assert await _drain(committed, 2) == [b"committed-1", b"committed-2"]
    uncommitted = await consumer_factory(topic, isolation_level="read_uncommitted")
    assert await _drain(uncommitted, 3) == [b"committed-1", b"aborted", b"committed-2"]


async def test_consume_transform_produce_commits_offsets_with_the_output(
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    """The exactly-once pattern every emitting consumer uses: output and input offsets commit
    together; after an aborted attempt the same input is processed again, once."""
    source = await topic_factory(partitions=1)
    sink = await topic_factory(partitions=1)
    serializer = AvroSerializer()
    feeder = await producer_factory()
    for i in range(3):
        await feeder.send(source, serializer.encode(STARTED.model_copy(update={"sample_index": i})))
    await feeder.flush()

    group = f"eos-{uuid.uuid4().hex[:8]}"
    producer = await producer_factory(transactional_id=f"eos-{uuid.uuid4().hex}")

    async def process_once(commit: bool) -> int:
        consumer = await consumer_factory(source, group_id=group)
        batch = await _drain(consumer, 3)
        tp = TopicPartition(source, 0)
        await producer.begin_transaction()
        for value in batch:
            started = serializer.decode_as(value, SessionStarted)
            await producer.send(
                sink, serializer.encode(CALL.model_copy(update={"seq": started.sample_index}))
            )
        await producer.send_offsets_to_transaction({tp: await consumer.position(tp)}, group)
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
        await consumer.stop()
        return len(batch)

    assert await process_once(commit=False) == 3  # crash-like abort: nothing is visible
    assert await process_once(commit=True) == 3  # the same input again, now committed

    out = await consumer_factory(sink)
    seqs = [serializer.decode_as(v, CallRecord).seq for v in await _drain(out, 3)]
    assert seqs == [0, 1, 2]
    # The group's committed offset moved with the transaction: nothing left to process.
    again = await consumer_factory(source, group_id=group)
    assert await again.getmany(timeout_ms=1000) == {}


async def test_overlapping_ordinary_tasks_blocks_restore_the_factory_after_the_last() -> None:
    loop = asyncio.get_running_loop()
    loop.set_task_factory(asyncio.eager_task_factory)
    try:
        first_in, second_in, first_out = asyncio.Event(), asyncio.Event(), asyncio.Event()
        seen: list[object] = []

        async def first() -> None:
            with ordinary_tasks():
                first_in.set()
                await second_in.wait()
            first_out.set()

        async def second() -> None:
            await first_in.wait()
            with ordinary_tasks():
                second_in.set()
                await first_out.wait()
                # The first block ended while this one is open: still no eager factory.
                seen.append(loop.get_task_factory())
            seen.append(loop.get_task_factory())

        await asyncio.gather(first(), second())
        assert seen == [None, asyncio.eager_task_factory]
    finally:
        loop.set_task_factory(None)


async def test_a_factory_installed_while_a_block_is_open_is_suspended_by_the_next_block() -> None:
    loop = asyncio.get_running_loop()
    try:
        with ordinary_tasks():
            loop.set_task_factory(asyncio.eager_task_factory)  # what mitmproxy does on start
            with ordinary_tasks():
                assert loop.get_task_factory() is None
            assert loop.get_task_factory() is None
        assert loop.get_task_factory() is asyncio.eager_task_factory
    finally:
        loop.set_task_factory(None)


async def test_a_rebalance_listener_failure_is_raised_by_the_next_poll(
    topic_factory: TopicFactory, kafka_settings: KafkaSettings
) -> None:
    """aiokafka logs and swallows what a listener raises: the partitions would stay assigned,
    unplaced, and the consumer would read on as if nothing happened."""
    topic = await topic_factory(partitions=2)

    class Failing(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
            raise RuntimeError("committed offsets unreadable")

    consumer = make_consumer(kafka_settings, group_id=f"g-{uuid.uuid4().hex}")
    consumer.subscribe([topic], listener=Failing())
    await consumer.start()
    try:
        with pytest.raises(BrokerError, match="committed offsets unreadable") as raised:
            async with asyncio.timeout(60):
                while True:
                    await consumer.getmany(timeout_ms=200)
        assert not raised.value.retriable  # a restart, not a retry
        assert isinstance(raised.value.__cause__, RuntimeError)
        with pytest.raises(BrokerError):  # and again: nothing reads on from there
            await consumer.getmany(timeout_ms=0)
    finally:
        await consumer.stop()


async def _pending_fetch(consumer: AIOKafkaConsumer) -> asyncio.Task[None]:
    """A fetch of the consumer's fetcher waiting, as one in retry backoff does."""
    fetcher = consumer._fetcher
    task = asyncio.create_task(asyncio.sleep(3600))
    fetcher._pending_tasks.add(task)
    await asyncio.sleep(0)
    return task


async def test_stopping_while_a_fetch_waits_is_not_a_cancellation(
    topic_factory: TopicFactory, kafka_settings: KafkaSettings
) -> None:
    """aiokafka's fetcher awaits the fetches it cancels on close (aiokafka#647): a trainer
    client stopping while one waited crashed with a CancelledError nobody had asked for."""
    topic = await topic_factory(partitions=1)
    consumer = make_consumer(kafka_settings, group_id=f"g-{uuid.uuid4().hex}")
    consumer.subscribe([topic])
    await consumer.start()
    fetches = [await _pending_fetch(consumer) for _ in range(3)]
    await consumer.stop()  # returns
    assert all(fetch.cancelled() for fetch in fetches)
    # and nothing is left open: aiokafka's own stop ended at the first fetch
    assert not any(conn.connected() for conn in consumer._client._conns.values())


async def test_a_cancelled_stop_stays_cancelled(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def stop_slowly(self: AIOKafkaConsumer) -> None:
        await asyncio.sleep(3600)

    monkeypatch.setattr(AIOKafkaConsumer, "stop", stop_slowly)
    consumer = make_consumer(kafka_settings, group_id=f"g-{uuid.uuid4().hex}")
    stopping = asyncio.create_task(consumer.stop())
    await asyncio.sleep(0)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    monkeypatch.undo()
    await consumer.stop()  # never started: closes at once
