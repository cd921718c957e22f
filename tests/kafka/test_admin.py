"""Topic creation is idempotent and reports drift; describe shows partitions, configs, counts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

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


async def test_create_waits_a_moment_for_a_new_topics_metadata(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the broker asked may not know a topic created a moment ago (on another)."""
    spec = TopicSpec(f"{kafka_settings.topic_prefix}.lagging", 2, {"retention.ms": "60000"})
    async with TopicAdmin(kafka_settings) as admin:
        [first] = await admin.create([spec])
        assert first.created
        real = admin._admin.describe_topics
        lag = {"reads": 0, "hidden_for": 3}

        async def lagging(topics: list[str] | None = None) -> list[dict[str, Any]]:
            answer: list[dict[str, Any]] = await real(topics)
            if topics is None or spec.name not in topics:
                return answer
            lag["reads"] += 1
            if lag["reads"] > lag["hidden_for"]:
                return answer
            # What a broker that has not applied the creation yet answers.
            return [
                {**t, "error_code": 3, "partitions": []} if t["topic"] == spec.name else t
                for t in answer
            ]

        monkeypatch.setattr(admin._admin, "describe_topics", lagging)
        [again] = await admin.create([spec])
        assert lag["reads"] == 4  # three answers without the topic, then the one with it
        assert not again.created and again.partitions == 2 and again.drift == {}

        lag |= {"reads": 0, "hidden_for": 10**6}
        began = time.monotonic()
        with pytest.raises(BrokerError, match=f"no such topic: {spec.name}") as error:
            await admin.create([spec])
        waited = time.monotonic() - began
        assert error.value.retriable is False
        assert 2.0 <= waited < 10 and lag["reads"] > 3  # asked again for its 2 s, then gave up


async def test_delete_removes_the_named_topics_that_exist_and_no_other(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory
) -> None:
    gone, kept = await topic_factory(), await topic_factory()
    async with TopicAdmin(kafka_settings) as admin:
        deleted = await admin.delete([gone, f"{gone}-never-made"])
        assert deleted == [gone]  # the missing name is no error
        async with asyncio.timeout(30):
            while gone in await admin.list_topics():  # noqa: ASYNC110
                await asyncio.sleep(0.2)
        assert kept in await admin.list_topics()
