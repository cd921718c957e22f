"""``CapturePublisher.settled``: when every record published so far would survive a crash.

A caller that records elsewhere that a record's effect is done (the rollout node committing a
sample as run once its SessionEnded is published) waits on it: a record still in the queue, in
hand or held in memory is lost with the process; one acknowledged or spooled is not.
"""

from __future__ import annotations

from pathlib import Path

from rollstream.producers.publisher.spool import Spool
from rollstream.schemas import RECORD_BUDGET_BYTES
from tests.producers.publisher.test_publisher_faults import FakeBroker, OnFakeBroker, _values
from tests.waiting import until


async def test_acknowledged_records_have_settled(tmp_path: Path) -> None:
    broker = FakeBroker()
    async with OnFakeBroker(tmp_path, broker) as publisher:
        assert await publisher.settled(0)  # nothing published yet
        for value in _values(3):
            publisher.publish(b"k", value)
        assert not await publisher.settled(0)  # still queued: a crash now loses them
        assert await publisher.settled(5)
        assert broker.log == _values(3)


async def test_a_batch_lingering_for_more_records_has_not_settled(tmp_path: Path) -> None:
    broker = FakeBroker()
    async with OnFakeBroker(tmp_path, broker, linger_ms=400) as publisher:
        publisher.publish(b"k", b"0")
        await until(lambda: publisher._queue.empty())  # taken off the queue, lingering
        assert broker.log == [] and publisher.spool.empty()
        assert not await publisher.settled(0)  # a crash now would lose it
        assert await publisher.settled(5)
        assert broker.log == [b"0"]


async def test_a_hanging_broker_settles_them_through_the_spool(tmp_path: Path) -> None:
    broker = FakeBroker()
    broker.hang = True
    async with OnFakeBroker(tmp_path, broker, send_timeout_s=0.3) as publisher:
        for value in _values(2):
            publisher.publish(b"k", value)
        assert not await publisher.settled(0.1)  # in hand, unacknowledged, not on disk
        assert await publisher.settled(5)  # past send_timeout_s the batch is spooled
        assert [r.value for r in Spool(tmp_path).read()] == _values(2)
        assert broker.log == []
        broker.release()
        await until(lambda: publisher.spool.empty())


async def test_records_held_in_memory_have_not_settled(tmp_path: Path) -> None:
    broker = FakeBroker()
    publisher = OnFakeBroker(tmp_path, broker)
    async with publisher:
        broker.up = False
        publisher.disk.full = True
        for value in _values(2):
            publisher.publish(b"k", value)
        await until(lambda: publisher.metrics.held == 2)
        assert not await publisher.settled(0.2)
        publisher.disk.full = False
        assert await publisher.settled(5)


async def test_a_record_set_aside_does_not_hold_the_others_back(tmp_path: Path) -> None:
    broker = FakeBroker()
    async with OnFakeBroker(tmp_path, broker) as publisher:
        publisher.publish(b"k", b"x" * (RECORD_BUDGET_BYTES + 1))  # rejected at once
        publisher.publish(b"k", b"ok")
        assert await publisher.settled(5)
        assert broker.log == [b"ok"] and publisher.metrics.rejected == 1
