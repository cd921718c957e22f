"""The capture publisher against a real broker that goes away and comes back."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rollstream.dev.broker import BrokerSettings, LocalBroker
from rollstream.host import free_port
from rollstream.kafka.admin import TopicAdmin
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.producers.publisher.rejected import RejectedRecords
from rollstream.schemas import TopicSpec
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE, TopicFactory
from tests.kafka_reading import read_values

pytestmark = pytest.mark.integration


async def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - polling metrics the publisher does not signal
            await asyncio.sleep(0.1)


async def test_records_flow_in_order_without_an_outage(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory()
    async with CapturePublisher(
        kafka_settings, PublisherSettings(), topic, tmp_path / "spool"
    ) as publisher:
        for i in range(300):
            publisher.publish(b"s1", b"%d" % i)
        await _wait_for(lambda: publisher.metrics.published == 300)
        assert publisher.metrics.spooled == 0
    assert await read_values(kafka_settings, topic, 300, distinct=True) == [
        b"%d" % i for i in range(300)
    ]


async def test_records_arriving_within_the_linger_share_a_batch(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """Calls end in waves; their records go out in one Kafka request, not one each."""
    topic = await topic_factory()
    settings = PublisherSettings(linger_ms=300)
    async with CapturePublisher(kafka_settings, settings, topic, tmp_path / "spool") as publisher:
        for i in range(3):
            publisher.publish(b"s1", b"a%d" % i)
            await asyncio.sleep(0.05)  # spread out, but within the linger
        await _wait_for(lambda: publisher.metrics.published == 3)
        assert publisher.metrics.batches == 1
    async with CapturePublisher(
        kafka_settings, PublisherSettings(linger_ms=0), topic, tmp_path / "spool2"
    ) as eager:
        for i in range(3):
            eager.publish(b"s1", b"b%d" % i)
            await asyncio.sleep(0.1)
        await _wait_for(lambda: eager.metrics.published == 3)
        assert eager.metrics.batches == 3  # no linger: each goes as soon as it is there
    assert await read_values(kafka_settings, topic, 6, distinct=True) == [
        b"a0",
        b"a1",
        b"a2",
        b"b0",
        b"b1",
        b"b2",
    ]


async def test_a_broker_outage_loses_nothing_and_keeps_order(tmp_path: Path) -> None:
    port = free_port()
    broker = LocalBroker(
        BrokerSettings(data_dir=tmp_path / "kafka", port=port, heap="512m"),
        StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE),
        record_state=False,
    )
    info = broker.start()
    settings = KafkaSettings(bootstrap_servers=info.bootstrap_servers, topic_prefix="outage")
    topic = f"outage.{uuid.uuid4().hex[:6]}"
    async with TopicAdmin(settings) as admin:
        await admin.create([TopicSpec(topic, 1)])
    publisher = CapturePublisher(
        settings,
        PublisherSettings(send_timeout_s=3, retry_interval_s=0.5),
        topic,
        tmp_path / "spool",
    )
    await publisher.start()
    try:
        for i in range(50):
            publisher.publish(b"s1", b"%d" % i)
        await _wait_for(lambda: publisher.metrics.published == 50)

        os.kill(info.pid, signal.SIGKILL)  # the broker dies without warning
        for i in range(50, 150):
            publisher.publish(b"s1", b"%d" % i)  # returns at once: never blocks the harness
        await _wait_for(lambda: publisher.metrics.spooled >= 100)
        assert publisher.metrics.connected is False
        assert publisher.spool.pending_bytes > 0

        restarted = broker.start()  # same data dir, same port
        assert restarted.port == port
        for i in range(150, 200):
            publisher.publish(b"s1", b"%d" % i)  # queued behind the spool
        await _wait_for(lambda: publisher.spool.empty() and publisher.metrics.queue_depth == 0)
        await _wait_for(lambda: publisher.metrics.published + publisher.metrics.drained >= 200, 60)
    finally:
        await publisher.stop()
        broker.stop()
        broker = LocalBroker(
            BrokerSettings(data_dir=tmp_path / "kafka", port=port, heap="512m"),
            StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE),
            record_state=False,
        )
    broker.start()
    try:
        values = await read_values(settings, topic, 200, distinct=True)
    finally:
        broker.stop()
    # Nothing lost; a batch in flight when the broker died may have been written twice, but
    # the first occurrences keep the order.
    assert set(values) == {b"%d" % i for i in range(200)}
    firsts = list(dict.fromkeys(values))
    assert firsts == [b"%d" % i for i in range(200)]


async def test_records_the_topic_refuses_for_size_are_set_aside_and_the_rest_flows(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """A topic with a small max.message.bytes (Kafka's default is 1 MiB; this one 64 KiB).

    One record is too large for it on its own: set aside with the broker's reason. Three others
    fit one by one but not together in one batch: the broker refuses the batch, and they are
    sent again one at a time. Records after them flow on, in order.
    """
    topic = await topic_factory(configs={"max.message.bytes": str(64 * 1024)})
    big = os.urandom(100 * 1024)  # random: compression does not bring it under the limit
    fits = [os.urandom(30 * 1024) for _ in range(3)]
    spool = tmp_path / "spool"
    async with CapturePublisher(
        kafka_settings, PublisherSettings(linger_ms=100), topic, spool
    ) as publisher:
        publisher.publish(b"s1", b"first")
        publisher.publish(b"s1", big)
        for value in fits:
            publisher.publish(b"s1", value)
        publisher.publish(b"s1", b"last")
        await _wait_for(lambda: publisher.metrics.published == 5)
        assert publisher.metrics.rejected == 1 and publisher.spool.empty()
    assert await read_values(kafka_settings, topic, 5, distinct=True) == [b"first", *fits, b"last"]
    [rejected] = RejectedRecords(spool).read()
    assert rejected.value == big and rejected.topic == topic
    assert "MessageSizeTooLargeError" in rejected.reason
