"""An orphaned spool adopted against a real broker: every record on the topic exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.host import free_port
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.producers.publisher.spool import Spool
from rollstream.settings import KafkaSettings
from tests.conftest import TopicFactory
from tests.kafka_reading import read_values
from tests.waiting import until

pytestmark = pytest.mark.integration

ORPHANED = 2500  # several adoption chunks


async def test_an_orphaned_spool_reaches_the_topic_exactly_once(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory()
    root = tmp_path / "spool"
    # A worker of a pool whose broker was away until it stopped; the pool came back smaller.
    away = kafka_settings.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    settings = PublisherSettings(send_timeout_s=1, retry_interval_s=0.2)
    gone = CapturePublisher(away, settings, topic, root / "x-worker-3")
    async with gone:
        for i in range(ORPHANED):
            gone.publish(b"s%d" % (i % 7), b"%d" % i)
    orphaned = [r.value for r in Spool(root / "x-worker-3").read(10 * ORPHANED)]
    assert orphaned == [b"%d" % i for i in range(ORPHANED)]

    survivor = CapturePublisher(kafka_settings, PublisherSettings(), topic, root / "x-worker-0")
    async with survivor:
        survivor.publish(b"s0", b"new")
        sent = survivor.metrics
        await until(lambda: sent.drained + sent.published > ORPHANED, 60, "all were sent")
        assert survivor.metrics.adopted == ORPHANED
    assert not (root / "x-worker-3").exists()
    assert await read_values(kafka_settings, topic, ORPHANED + 1, settle_ms=1000) == [
        *orphaned,
        b"new",
    ]
