"""SyncTrajectoryStream against a real broker: a blocking loop, its thread, errors and stops.

The tests are async only to use the async fixtures; the stream's calls block the test's loop,
as they would block a training loop, while the stream works on its own loop and thread.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest
from aiokafka.errors import KafkaConnectionError

from rollstream.consumers.trainer import (
    Group,
    StreamPosition,
    SyncTrajectoryStream,
    TrainerSettings,
)
from rollstream.errors import BrokerError, ConfigurationError
from rollstream.schemas import PolicyVersion, TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.trainer.records import group_of
from tests.consumers.trainer.test_consumer_settings import topic_visible
from tests.consumers.trainer.test_stream import Placed, produce, sentinel
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rollstream-trainer-")]


def groups_until(stream: SyncTrajectoryStream, last: str) -> list[Group]:
    got = []
    for group in stream.groups():
        got.append(group)
        if group.group_id == last:
            return got
    raise AssertionError("the stream ended")


@pytest.fixture
def no_stream_left() -> Iterator[None]:
    """Every stream a test made has stopped its thread by the end of the test."""
    yield
    assert stream_threads() == []


async def test_a_training_loop_without_async(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    no_stream_left: None,
) -> None:
    topic = rollstream_topics.scored
    old = group_of("old", 2, versions=[3])
    fresh = group_of("fresh", 2, versions=[9])
    placed: Placed = [(0, old[0]), (1, old[1]), (0, fresh[0]), (2, fresh[1])]
    end: Placed = list(enumerate(group_of("end", 3, versions=[9])))  # one on each partition
    await produce(await producer_factory(), topic, placed + end)

    stream = SyncTrajectoryStream(TrainerSettings(max_staleness=1), "trainer-sync", kafka_settings)
    stream.policy_version = 9  # before start, as after restoring a checkpoint
    with stream:
        assert [t.name for t in stream_threads()] == ["rollstream-trainer-trainer-sync"]
        got = groups_until(stream, "end")
        assert [g.group_id for g in got] == ["fresh", "end"]
        metrics = stream.metrics
        assert (metrics.delivered_groups, metrics.dropped_stale) == (2, 1)
        assert stream.commit() == {(topic, 0): 3, (topic, 1): 2, (topic, 2): 2}
        position = stream.positions()
        assert isinstance(position, StreamPosition)
        assert position.offsets == {(topic, 0): 3, (topic, 1): 2, (topic, 2): 2}
        published = stream.publish_policy_version(10, {"step": "1"})
        assert (published.version, published.publisher) == (10, "trainer-sync")
        assert stream.policy_version == 10
    assert stream_threads() == []
    assert stream.metrics.delivered_groups == 2  # still readable after close
    [control] = await read_records(kafka_settings, rollstream_topics.control, PolicyVersion, 1)
    assert (control.version, control.metadata) == (10, {"step": "1"})


async def test_batches_mode(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    no_stream_left: None,
) -> None:
    records = group_of("a", 3) + group_of("b", 2)
    await produce(await producer_factory(), rollstream_topics.scored, [(1, r) for r in records])
    settings = TrainerSettings(mode="batches", batch_size=4)
    with SyncTrajectoryStream(settings, "trainer-sync-b", kafka_settings) as stream:
        batch = next(stream.batches())
        assert list(batch.records) == records[:4]
        with pytest.raises(ConfigurationError, match="groups\\(\\) needs mode groups"):
            next(stream.groups())


async def test_errors_on_the_streams_loop_reach_the_caller(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    monkeypatch: pytest.MonkeyPatch,
    no_stream_left: None,
) -> None:
    missing = TrainerSettings(topic="nosuch")
    with (
        pytest.raises(ConfigurationError, match="nosuch"),
        SyncTrajectoryStream(missing, "trainer-x", kafka_settings),
    ):
        pass  # never reached: start raises, and no thread is left running
    assert stream_threads() == []

    await topic_visible(kafka_settings, rollstream_topics.scored)
    with SyncTrajectoryStream(TrainerSettings(), "trainer-err", kafka_settings) as stream:
        consumer = stream.stream._consumer
        assert consumer is not None

        async def broken(*args: object, **kwargs: object) -> object:
            raise KafkaConnectionError("the broker went away")

        monkeypatch.setattr(consumer, "getmany", broken)
        with pytest.raises(BrokerError, match="the broker went away"):
            stream.next()
    with pytest.raises(ConfigurationError, match="not started"):
        stream.commit()


async def test_close_ends_an_iteration_waiting_in_another_thread(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, no_stream_left: None
) -> None:
    await topic_visible(kafka_settings, rollstream_topics.scored)
    stream = SyncTrajectoryStream(TrainerSettings(), "trainer-idle", kafka_settings)
    stream.start()
    got: list[Group] = []
    reader = threading.Thread(target=lambda: got.extend(stream.groups()))
    reader.start()
    while stream._waiting is None:  # the test's loop has nothing else to do meanwhile
        reader.join(0.01)
    stream.close()
    reader.join(30)
    assert not reader.is_alive() and got == []
    assert stream.next() is None
    stream.close()  # twice is harmless


class Interrupted(BaseException):
    """What the signal handler raises, like KeyboardInterrupt on Ctrl-C."""


async def test_an_interrupted_wait_loses_nothing(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    no_stream_left: None,
) -> None:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    await topic_visible(kafka_settings, rollstream_topics.scored)
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        with SyncTrajectoryStream(TrainerSettings(), "trainer-int", kafka_settings) as stream:
            timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1))
            timer.start()
            with pytest.raises(Interrupted):
                stream.next()  # nothing to read yet: waiting when the signal comes
            timer.join()
            await produce(await producer_factory(), rollstream_topics.scored, sentinel("g"))
            group = stream.next()
            assert isinstance(group, Group) and group.group_id == "g"
            assert stream.commit() == {(rollstream_topics.scored, p): 1 for p in range(3)}
    finally:
        signal.signal(signal.SIGUSR1, previous)
