"""The chaos suite's topic reader waits for a topic that reaches the metadata late."""

from __future__ import annotations

import asyncio

import pytest

from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import TopicNames, topic_specs
from rollstream.settings import KafkaSettings
from tests.chaos.pipeline import TopicReader

pytestmark = pytest.mark.integration


async def test_a_reader_started_before_its_topic_exists_waits_for_it(
    kafka_settings: KafkaSettings, topic_names: TopicNames
) -> None:
    reader = TopicReader(kafka_settings, topic_names.events)
    starting = asyncio.create_task(reader.start())
    try:
        await asyncio.sleep(1.0)  # the reader asked: no such topic yet
        assert not starting.done()
        async with TopicAdmin(kafka_settings) as admin:
            await admin.create(topic_specs(topic_names, partitions=2, retention_days=1))
        await asyncio.wait_for(starting, 35)
        assert reader._consumer is not None and len(reader._consumer.assignment()) == 2
    finally:
        starting.cancel()
        await reader.stop()
