"""The control topic: a published policy version reaches watchers, late ones included."""

from __future__ import annotations

import asyncio

import pytest

from rollstream.errors import ConfigurationError
from rollstream.kafka.control import PolicyWatcher, publish_policy_version
from rollstream.schemas import PolicyVersion, TopicNames
from rollstream.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_a_watcher_sees_new_versions_and_a_late_one_starts_at_the_latest(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames
) -> None:
    seen: list[int] = []

    def record(version: PolicyVersion) -> None:
        seen.append(version.version)

    async with PolicyWatcher(kafka_settings, record) as watcher:
        assert watcher.current is None and watcher.version == 0
        await publish_policy_version(kafka_settings, 3, publisher="trainer-a")
        await publish_policy_version(kafka_settings, 4, metadata={"step": "2"})
        for _ in range(100):
            if watcher.version == 4:
                break
            await asyncio.sleep(0.1)
        assert seen == [3, 4]
        assert watcher.current is not None and watcher.current.metadata == {"step": "2"}
    async with PolicyWatcher(kafka_settings) as late:
        assert late.version == 4  # known as soon as start() returns


async def test_without_the_control_topic_the_watcher_says_so(
    kafka_settings: KafkaSettings,
) -> None:
    with pytest.raises(ConfigurationError, match="control"):
        await PolicyWatcher(kafka_settings).start()
