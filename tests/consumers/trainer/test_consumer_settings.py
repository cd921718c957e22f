"""The stream's consumer against a real broker: where a new group starts, long training steps,
and partitions assigned explicitly (one consumer per data-parallel rank)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from aiokafka.structs import TopicPartition

from rollstream.consumers.trainer import Group, TrainerSettings, TrajectoryStream
from rollstream.errors import ConfigurationError
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ConsumerFactory, ProducerFactory
from tests.consumers.trainer.records import group_of
from tests.consumers.trainer.test_stream import Placed, collect_until, produce, sentinel
from tests.waiting import until

pytestmark = pytest.mark.integration


def on(partition: int, *names: str, samples: int = 2) -> Placed:
    """Every sample of each named group, on ``partition``."""
    return [(partition, r) for name in names for r in group_of(name, samples)]


async def placed_at(stream: TrajectoryStream, ends: dict[int, int]) -> None:
    """Wait until the stream is assigned every partition and placed at ``ends`` (by partition)."""
    consumer = stream._consumer
    assert consumer is not None

    async def there() -> bool:
        assigned = consumer.assignment()
        if len(assigned) != len(ends):
            return False
        return all([await consumer.position(tp) == ends[tp.partition] for tp in assigned])

    await until(there, what=f"the stream placed at {ends}")


async def topic_visible(kafka: KafkaSettings, topic: str) -> None:
    """Wait until the broker's metadata lists ``topic``, which a new topic may lag behind.

    A test that starts a stream before it produces anything would otherwise race it.
    """
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        await until(lambda: topic_partitions(consumer, topic), what=f"{topic} in the metadata")
    finally:
        await consumer.stop()


def written_before(seconds: float = 0.05) -> datetime:
    """A time between what was produced before this call and what is produced after it."""
    return datetime.now(UTC) - timedelta(seconds=seconds)


async def test_start_latest_reads_only_what_is_written_after_the_group_starts(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    topic, producer = rollstream_topics.scored, await producer_factory()
    await produce(producer, topic, on(0, "old") + on(1, "old1"))
    settings = TrainerSettings(start="latest")
    async with TrajectoryStream(settings, "trainer-latest", kafka_settings) as stream:
        await placed_at(stream, {0: 2, 1: 2, 2: 0})
        await produce(producer, topic, on(0, "new") + on(2, "new2") + sentinel("end"))
        got = await collect_until(stream, "end")
        assert sorted(g.group_id for g in got) == ["end", "new", "new2"]
        assert await stream.commit() == {(topic, 0): 5, (topic, 1): 3, (topic, 2): 3}


async def test_start_at_a_time_reads_what_was_written_from_then_until_the_group_commits(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    topic, producer = rollstream_topics.scored, await producer_factory()
    await produce(producer, topic, on(0, "before") + on(1, "before1"))
    await asyncio.sleep(0.2)
    since = written_before(0.1)
    await produce(producer, topic, on(0, "after"))

    settings = TrainerSettings(start=since)
    async with TrajectoryStream(settings, "trainer-time", kafka_settings) as stream:
        got = await collect_until(stream, "after")
        assert [g.group_id for g in got] == ["after"]
        assert stream.metrics.delivered_records == 2  # "before" was never read
        assert await stream.commit() == {(topic, 0): 4}

    # Once the group has committed, a restart resumes there, whatever the time says.
    await produce(producer, topic, on(0, "later"))
    future = TrainerSettings(start=datetime.now(UTC) + timedelta(hours=1))
    async with TrajectoryStream(future, "trainer-time", kafka_settings) as stream:
        assert [g.group_id for g in await collect_until(stream, "later")] == ["later"]


async def test_start_at_a_time_after_every_record_reads_from_the_end(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    topic, producer = rollstream_topics.scored, await producer_factory()
    await produce(producer, topic, on(0, "old") + on(2, "old2"))
    settings = TrainerSettings(start=datetime.now(UTC) + timedelta(seconds=1))
    async with TrajectoryStream(settings, "trainer-end", kafka_settings) as stream:
        await placed_at(stream, {0: 2, 1: 0, 2: 2})
        await produce(producer, topic, on(2, "new"))
        assert [g.group_id for g in await collect_until(stream, "new")] == ["new"]


async def test_a_step_longer_than_max_poll_interval_costs_the_partitions_then_recovers(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    topic = rollstream_topics.scored
    await produce(await producer_factory(), topic, on(0, "g0", "g1", "g2"))
    settings = TrainerSettings(max_poll_interval_ms=2000)
    async with TrajectoryStream(settings, "trainer-slow", kafka_settings) as stream:
        assert (await anext(stream.groups())).group_id == "g0"
        # The training step outlasts max_poll_interval_ms: the broker deems the trainer gone.
        await until(
            lambda: stream.metrics.revoked_partitions == 3,
            what="the partitions revoked from a trainer that stopped polling",
        )
        assert await stream.commit() == {}  # not its partitions any more: nothing to commit
        # The next read rejoins and reads again from the committed offsets (none): g0 is
        # remembered as delivered, g1 and g2 are assembled again.
        assert [g.group_id for g in await collect_until(stream, "g2")] == ["g1", "g2"]
        assert stream.metrics.duplicates == 2
        assert await stream.commit() == {(topic, 0): 6}


async def test_steps_within_max_poll_interval_keep_the_partitions_across_one_poll(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """One poll completes four groups; four steps take longer than the interval in all, but
    each is shorter: asking for the next group counts as a poll."""
    topic = rollstream_topics.scored
    await produce(await producer_factory(), topic, on(0, "g0", "g1", "g2", "g3"))
    settings = TrainerSettings(max_poll_interval_ms=3000)
    async with TrajectoryStream(settings, "trainer-steady", kafka_settings) as stream:
        got = [await anext(stream.groups())]
        for _ in range(3):
            await asyncio.sleep(1.5)  # a training step
            got.append(await anext(stream.groups()))
        assert [g.group_id for g in got] == ["g0", "g1", "g2", "g3"]
        assert (stream.metrics.revoked_partitions, stream.metrics.duplicates) == (0, 0)
        assert await stream.commit() == {(topic, 0): 8}


async def test_ranks_read_the_partitions_assigned_to_them_and_commit_them_in_one_group(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    topic, producer = rollstream_topics.scored, await producer_factory()
    await produce(producer, topic, on(0, "a0", "b0") + on(1, "a1") + on(2, "a2", "b2"))

    def names(groups: list[Group]) -> set[str]:
        return {g.group_id for g in groups}

    async with (
        TrajectoryStream(TrainerSettings(), "trainer-dp", kafka_settings, partitions=[0]) as r0,
        TrajectoryStream(TrainerSettings(), "trainer-dp", kafka_settings, partitions=[2, 1]) as r1,
    ):
        assert names(await collect_until(r0, "b0")) == {"a0", "b0"}
        got = await collect_until(r1, "b2")
        if "a1" not in names(got):
            got += await collect_until(r1, "a1")
        assert names(got) == {"a1", "a2", "b2"}
        assert r1.partitions == [1, 2]
        assert await r0.commit() == {(topic, 0): 4}
        assert await r1.commit() == {(topic, 1): 2, (topic, 2): 4}
    reader = await consumer_factory(group_id="trainer-dp")
    for partition, offset in {0: 4, 1: 2, 2: 4}.items():
        assert await reader.committed(TopicPartition(topic, partition)) == offset

    # A restarted rank resumes its partitions from the group's commits.
    await produce(producer, topic, on(0, "c0") + on(1, "c1"))
    async with TrajectoryStream(
        TrainerSettings(), "trainer-dp", kafka_settings, partitions=[0]
    ) as r0:
        assert names(await collect_until(r0, "c0")) == {"c0"}
        assert r0.metrics.delivered_records == 2  # c1 is rank 1's


async def test_partitions_the_topic_lacks_are_refused(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames
) -> None:
    await topic_visible(kafka_settings, rollstream_topics.scored)
    stream = TrajectoryStream(TrainerSettings(), "trainer-x", kafka_settings, partitions=[1, 3])
    with pytest.raises(ConfigurationError, match="3 partitions, not 3"):
        await stream.start()
