"""Topic creation is idempotent and reports drift; describe shows partitions, configs, counts."""

from __future__ import annotations

import asyncio

import pytest

from rollstream.errors import BrokerError
from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory, TopicFactory

pytestmark = pytest.mark.integration


async def test_create_is_idempotent_and_reports_drift(
    kafka_settings: KafkaSettings, topic_names: TopicNames
) -> None:
    specs = topic_specs(topic_names, partitions=2, retention_days=1)
    async with TopicAdmin(kafka_settings) as admin:
        first = await admin.create(specs)
        assert all(r.created for r in first)
        # A created topic reaches the metadata a listing reads a moment later (seen once
        # under load in a fresh-clone run): wait for it, bounded, rather than race it.
        created = {r.name for r in first}
        async with asyncio.timeout(30):
            while not created <= set(await admin.list_topics()):  # noqa: ASYNC110
                await asyncio.sleep(0.2)

        second = await admin.create(specs)
        assert not any(r.created for r in second)
        assert all(r.drift == {} for r in second)

        # Asking for other sizes never changes an existing topic; it reports the difference.
        other = await admin.create(topic_specs(topic_names, partitions=3, retention_days=2))
        events = next(r for r in other if r.name == topic_names.events)
        assert events.partitions == 2
        assert events.drift["partitions"] == ("3", "2")
        assert events.drift["retention.ms"] == (str(2 * 86_400_000), str(86_400_000))

        [described] = await admin.describe([topic_names.events])
        assert described.partitions == 2
        assert described.configs["compression.type"] == "zstd"
        assert described.configs["retention.ms"] == str(86_400_000)
        assert described.records == 0


async def test_describe_counts_records_and_rejects_unknown_topics(
    kafka_settings: KafkaSettings, producer_factory: ProducerFactory, topic_factory: TopicFactory
) -> None:
    topic = await topic_factory(partitions=2)
    producer = await producer_factory()
    for i in range(5):
        await producer.send(topic, b"x", partition=i % 2)
    await producer.flush()
    async with TopicAdmin(kafka_settings) as admin:
        [described] = await admin.describe([topic])
        assert described.records == 5
        assert described.offsets == {0: (0, 3), 1: (0, 2)}
        with pytest.raises(BrokerError, match="no such topic"):
            await admin.describe([f"{kafka_settings.topic_prefix}.missing"])


async def test_invalid_config_is_a_clear_error(kafka_settings: KafkaSettings) -> None:
    spec = TopicSpec(f"{kafka_settings.topic_prefix}.bad", 1, {"cleanup.policy": "sometimes"})
    async with TopicAdmin(kafka_settings) as admin:
        with pytest.raises(BrokerError, match=r"creating topic .*bad.* failed"):
            await admin.create([spec])
