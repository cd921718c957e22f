"""The publisher's queue, spool and sending task in order, with the Kafka send replaced.

The broker side is covered against a real broker in test_publisher.py; these drive the
queue-overflow paths, which need a burst larger than the queue while the sending task waits.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings, Record
from rollstream.producers.publisher.spool import Spool
from rollstream.settings import KafkaSettings
from tests.waiting import until


class Recording(CapturePublisher):
    """A publisher whose Kafka sends always succeed, into ``sent``."""

    def __init__(self, spool_dir: Path, **settings: object) -> None:
        super().__init__(
            KafkaSettings(), PublisherSettings.model_validate(settings), "t", spool_dir
        )
        self.sent: list[bytes] = []

    async def _send(self, batch: list[Record]) -> tuple[int, int]:
        self.sent += [value for _, value in batch]
        return len(batch), len(batch)


async def test_an_overflow_while_idle_is_sent_at_once_and_in_order(tmp_path: Path) -> None:
    publisher = Recording(tmp_path, max_queue_records=1, linger_ms=0)
    async with publisher:
        await asyncio.sleep(0.05)  # the sending task waits on the empty queue
        publisher.publish(b"k", b"1")
        publisher.publish(b"k", b"2")  # the queue is full: both go to the spool
        await until(lambda: publisher.sent == [b"1", b"2"])
        publisher.publish(b"k", b"3")
        await until(lambda: len(publisher.sent) == 3)
    assert publisher.sent == [b"1", b"2", b"3"]


async def test_records_queued_after_an_overflow_never_overtake_the_spooled_ones(
    tmp_path: Path,
) -> None:
    publisher = Recording(tmp_path, max_queue_records=2, linger_ms=50)
    async with publisher:
        for burst in range(20):  # bursts larger than the queue, while the task lingers
            for i in range(5):
                publisher.publish(b"k", f"{burst}-{i}".encode())
            await asyncio.sleep(0.01)
        await until(lambda: len(publisher.sent) == 100)
    expected = [f"{burst}-{i}".encode() for burst in range(20) for i in range(5)]
    assert publisher.sent == expected


async def test_a_publisher_stopped_twice_stops_quietly_with_its_records_spooled(
    tmp_path: Path,
) -> None:
    publisher = Recording(tmp_path, max_queue_records=5, linger_ms=0)
    publisher.publish(b"k", b"queued")
    await publisher.start()
    await publisher.stop()
    await publisher.stop()  # a second stop (a supervisor's and an exit handler's) is harmless
    assert [r.value for r in Spool(tmp_path).read()] + publisher.sent == [b"queued"]
