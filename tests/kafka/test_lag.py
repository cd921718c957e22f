"""Consumer group lags: data records not yet consumed, transaction markers not counted."""

from __future__ import annotations

import uuid

from aiokafka.structs import TopicPartition

from rollstream.kafka.lag import group_lags
from rollstream.settings import KafkaSettings
from tests.conftest import ConsumerFactory, ProducerFactory, TopicFactory


async def test_a_group_that_read_every_transaction_has_no_lag(
    kafka_settings: KafkaSettings,
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    topic = await topic_factory(partitions=1)
    producer = await producer_factory(transactional_id=f"status-{uuid.uuid4().hex[:8]}")
    for i in range(3):  # each transaction ends with a commit marker, which takes an offset
        async with producer.transaction():
            await producer.send(topic, f"r{i}".encode())
    reader = await consumer_factory(topic)
    read = 0
    while read < 2:
        batch = await reader.getmany(timeout_ms=1000, max_records=2 - read)
        read += sum(len(messages) for messages in batch.values())
    tp = TopicPartition(topic, 0)
    await reader.commit({tp: (await reader.position(tp))})
    group = reader._group_id  # the unique group the factory made up
    [lag] = [g for g in await group_lags(kafka_settings, {topic}) if g.group == group]
    assert lag.lag == 1  # one record left; its offset range holds 1 record and 2 markers
    last = await reader.getone()
    assert last.value == b"r2"
    await reader.commit({tp: (await reader.position(tp))})
    [lag] = [g for g in await group_lags(kafka_settings, {topic}) if g.group == group]
    assert lag.lag == 0  # everything read: the trailing marker is not a record behind


async def test_two_groups_on_one_topic_are_each_counted(
    kafka_settings: KafkaSettings,
    topic_factory: TopicFactory,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    topic = await topic_factory(partitions=1)
    producer = await producer_factory(transactional_id=f"status-{uuid.uuid4().hex[:8]}")
    async with producer.transaction():
        for i in range(4):
            await producer.send(topic, f"r{i}".encode())
    tp = TopicPartition(topic, 0)
    behind = {}
    for wanted in (1, 3):  # one group reads 1 record, the other 3
        reader = await consumer_factory(topic)
        for _ in range(wanted):
            await reader.getone()
        await reader.commit({tp: wanted})
        behind[reader._group_id] = 4 - wanted  # the unique group the factory made up
    lags = {g.group: g.lag for g in await group_lags(kafka_settings, {topic})}
    assert {group: lags[group] for group in behind} == behind
