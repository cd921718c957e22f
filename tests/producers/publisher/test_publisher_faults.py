"""The publisher under faults, with a fake broker: a full disk, a hanging broker, size limits.

``FakeBroker`` stands in for Kafka at the producer level (``send`` returns a future per record,
as aiokafka's does): it can be away, hang without answering, or refuse records above a size
the way a topic's ``max.message.bytes`` does. The real broker's side of the same paths is in
test_publisher.py and tests/chaos.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.producers.publisher.connection import BrokerConnection
from rollstream.producers.publisher.rejected import RejectedRecords
from rollstream.producers.publisher.spool import Spool, SpoolError
from rollstream.schemas import RECORD_BUDGET_BYTES
from rollstream.settings import KafkaSettings
from tests.waiting import until

Record = tuple[bytes | None, bytes]


class FakeBroker:
    """What the fake producers send to: ``log`` holds what it acknowledged, in order."""

    def __init__(self) -> None:
        self.up = True
        self.hang = False
        self.topic_limit = 1 << 30  # a topic's max.message.bytes
        self.log: list[bytes] = []
        self.hanging: list[tuple[bytes, asyncio.Future[None]]] = []

    def release(self, error: Exception | None = None) -> None:
        """Answer the hanging sends: acknowledged, or failed with ``error``."""
        self.hang = False
        for value, future in self.hanging:
            if error is None:
                self.log.append(value)
                future.set_result(None)
            else:
                future.set_exception(error)
        self.hanging = []


class FakeProducer:
    """The part of AIOKafkaProducer the publisher uses."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> Any:
        if len(value) > 16 * 1024 * 1024:  # the client's own check (max_request_size)
            raise MessageSizeTooLargeError("larger than max_request_size")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self.broker.up:
            future.set_exception(KafkaConnectionError("broker away"))
        elif self.broker.hang:
            self.broker.hanging.append((value, future))
        elif len(value) > self.broker.topic_limit:
            future.set_exception(MessageSizeTooLargeError())
        else:
            self.broker.log.append(value)
            future.set_result(None)
        return future

    async def stop(self) -> None:
        pass


class FakeConnection(BrokerConnection):
    """Producers for a FakeBroker: none while it is away."""

    def __init__(self, broker: FakeBroker, real: BrokerConnection) -> None:
        super().__init__(real.kafka, real.metrics, real.start_timeout_s, real.waiting)
        self.broker = broker

    async def _start(self) -> Any:
        if not self.broker.up:
            self.failed(KafkaConnectionError("broker away"))
            return None
        return FakeProducer(self.broker)


class Disk:
    """Makes a spool's appends fail while ``full``."""

    def __init__(self, spool: Spool) -> None:
        self.full = False
        self.refused = 0
        append = spool.append

        def guarded(records: list[Record]) -> None:
            if self.full:
                self.refused += 1
                raise SpoolError("cannot write to the spool: No space left on device")
            append(records)

        spool.append = guarded  # type: ignore[method-assign]


class OnFakeBroker(CapturePublisher):
    """A publisher on a FakeBroker; fails (``spun``) if its sending task never yields."""

    def __init__(self, spool_dir: Path, broker: FakeBroker, **settings: object) -> None:
        settings = {"linger_ms": 0, "retry_interval_s": 0.02, "send_timeout_s": 5} | settings
        super().__init__(
            KafkaSettings(), PublisherSettings.model_validate(settings), "t", spool_dir
        )
        self.broker = broker
        self._connection = FakeConnection(broker, self._connection)
        self.disk = Disk(self.spool)
        self.spun = False
        self._turns = 0
        self._yielded = True

    def _turn(self) -> None:
        # A turn of the sending loop that did not give the event loop back since the last one
        # is a spin: after many of them the task stops itself, or the test would hang.
        self._turns = 0 if self._yielded else self._turns + 1
        self._yielded = False
        asyncio.get_running_loop().call_soon(self._mark_yielded)
        if self._turns > 1000:
            self.spun = True
            raise AssertionError("the sending task spins on the event loop")

    def _mark_yielded(self) -> None:
        self._yielded = True

    async def _drain_spool(self) -> bool:
        self._turn()
        return await super()._drain_spool()

    async def _next_batch(self) -> list[Record]:
        self._turn()
        return await super()._next_batch()


def _values(n: int, start: int = 0) -> list[bytes]:
    return [b"%d" % i for i in range(start, start + n)]


async def test_a_full_disk_and_an_absent_broker_make_the_sender_wait_not_spin(
    tmp_path: Path,
) -> None:
    broker = FakeBroker()
    publisher = OnFakeBroker(tmp_path, broker)
    async with publisher:
        broker.up = False
        publisher.disk.full = True
        for value in _values(3):
            publisher.publish(b"k", value)
        await until(lambda: publisher.metrics.held == 3)
        refused = publisher.disk.refused
        await asyncio.sleep(0.2)  # the sending task retries meanwhile, without spinning
        assert not publisher.spun and not publisher._task.done()  # type: ignore[union-attr]
        assert publisher.metrics.spool_alarm
        assert publisher.disk.refused > refused  # it went on trying the disk
        for value in _values(2, 3):
            publisher.publish(b"k", value)  # still accepted, held behind the others
        await until(lambda: publisher.metrics.held == 5)

        publisher.disk.full = False  # space back: held records go to the spool, in order
        await until(lambda: publisher.metrics.held == 0 and not publisher.metrics.spool_alarm)
        assert [r.value for r in Spool(tmp_path).read()] == _values(5)
        broker.up = True
        await until(lambda: publisher.spool.empty())
    assert broker.log == _values(5)  # each exactly once, in order
    assert publisher.metrics.dropped == 0 and not publisher.spun


async def test_records_held_in_memory_go_to_a_broker_back_before_the_disk(
    tmp_path: Path,
) -> None:
    broker = FakeBroker()
    publisher = OnFakeBroker(tmp_path, broker)
    async with publisher:
        broker.up = False
        publisher.disk.full = True
        for value in _values(4):
            publisher.publish(b"k", value)
        await until(lambda: publisher.metrics.held == 4)
        broker.up = True  # the disk is still full
        await until(lambda: broker.log == _values(4))
        publisher.publish(b"k", b"4")
        await until(lambda: broker.log == _values(5))
        assert publisher.metrics.held == 0 and publisher.spool.empty()
    assert not publisher.spun


async def test_stop_spools_the_batch_in_hand_when_the_broker_hangs(tmp_path: Path) -> None:
    """The broker takes the batch and never answers; stop() gives up on it and spools it."""
    broker = FakeBroker()
    broker.hang = True
    publisher = OnFakeBroker(tmp_path, broker)
    await publisher.start()
    for value in _values(3):
        publisher.publish(b"k", value)
    await until(lambda: len(broker.hanging) == 3)  # the batch is in hand, unanswered
    publisher.publish(b"k", b"3")  # queued behind it
    await publisher.stop(timeout=0.2)
    assert [r.value for r in Spool(tmp_path).read()] == _values(4)  # in order, nothing lost


async def test_a_batch_acknowledged_late_is_spooled_meanwhile_and_sent_once(
    tmp_path: Path,
) -> None:
    """Acks later than send_timeout_s: the batch is made durable, and not sent a second time.

    Giving up on the batch and sending it again through a new producer would write it twice
    once the broker answers (the first producer's retry lands too).
    """
    broker = FakeBroker()
    broker.hang = True
    publisher = OnFakeBroker(tmp_path, broker, send_timeout_s=0.1)
    async with publisher:
        for value in _values(3):
            publisher.publish(b"k", value)
        await until(lambda: len(Spool(tmp_path).read()) == 3)  # durable while unanswered
        assert not publisher.metrics.connected
        publisher.publish(b"k", b"3")  # behind it, in the spool
        await until(lambda: len(Spool(tmp_path).read()) == 4)
        broker.release()
        await until(lambda: publisher.spool.empty() and len(broker.log) >= 4)
        await asyncio.sleep(0.1)  # time for a copy to go out, if one were to
    assert broker.log == _values(4)


@pytest.mark.parametrize("outcome", ["acknowledged", "failed"])
async def test_a_batch_spooled_while_in_flight_keeps_its_place_and_is_not_sent_twice(
    outcome: str, tmp_path: Path
) -> None:
    """The queue overflows while a batch waits for acks: the batch goes to the spool first."""
    broker = FakeBroker()
    broker.hang = True
    publisher = OnFakeBroker(tmp_path, broker, max_queue_records=2)
    async with publisher:
        publisher.publish(b"k", b"0")
        await until(lambda: len(broker.hanging) == 1)  # b"0" is in flight
        for value in _values(3, 1):  # the third overflows the queue: all to the spool
            publisher.publish(b"k", value)
        # Written by the spool's own thread, the batch in flight first.
        await until(lambda: [r.value for r in Spool(tmp_path).read()] == _values(4))
        broker.release(None if outcome == "acknowledged" else KafkaConnectionError("reset"))
        await until(lambda: publisher.spool.empty() and len(broker.log) >= 4)
    assert broker.log == _values(4)  # once each, in order


async def test_a_record_too_large_for_the_topic_is_set_aside_and_later_ones_flow(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = FakeBroker()
    broker.topic_limit = 100  # a topic with a small max.message.bytes
    publisher = OnFakeBroker(tmp_path, broker)
    big = b"x" * 200
    async with publisher:
        publisher.publish(b"k", b"a")
        publisher.publish(b"big", big)
        publisher.publish(b"k", b"b")
        await until(lambda: broker.log == [b"a", b"b"])
        publisher.publish(b"k", b"c")
        await until(lambda: broker.log == [b"a", b"b", b"c"])
    assert publisher.metrics.rejected == 1 and publisher.spool.empty()
    [rejected] = RejectedRecords(tmp_path).read()
    assert (rejected.key, rejected.value, rejected.topic) == (b"big", big, "t")
    assert "MessageSizeTooLargeError" in rejected.reason
    assert "rejected" in caplog.text and "MessageSizeTooLargeError" in caplog.text


async def test_publish_sets_a_record_over_the_budget_aside_at_once(tmp_path: Path) -> None:
    broker = FakeBroker()
    publisher = OnFakeBroker(tmp_path, broker)
    huge = b"x" * (RECORD_BUDGET_BYTES + 1)
    async with publisher:
        publisher.publish(b"huge", huge)
        publisher.publish(b"k", b"after")
        await until(lambda: broker.log == [b"after"])
    assert publisher.metrics.rejected == 1
    [rejected] = RejectedRecords(tmp_path).read()
    assert rejected.value == huge and "record budget" in rejected.reason


async def test_held_records_moved_to_the_spool_while_being_sent_are_not_sent_twice(
    tmp_path: Path,
) -> None:
    """Records sent from memory (the disk was full) reach the spool before their acks come."""
    broker = FakeBroker()
    publisher = OnFakeBroker(tmp_path, broker, send_timeout_s=0.1)
    async with publisher:
        broker.up = False
        publisher.disk.full = True
        for value in _values(3):
            publisher.publish(b"k", value)
        await until(lambda: publisher.metrics.held == 3)
        broker.hang = True
        broker.up = True
        await until(lambda: len(broker.hanging) == 3)  # sent from memory, unanswered
        publisher.disk.full = False
        await until(lambda: len(Spool(tmp_path).read()) == 3)  # moved to the spool meanwhile
        broker.release()
        await until(lambda: publisher.spool.empty() and publisher.metrics.held == 0)
        await asyncio.sleep(0.1)  # time for a copy to go out, if one were to
    assert broker.log == _values(3)


async def test_the_disk_work_of_an_outage_never_runs_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends, reads, commits and set-asides run on the spool's own thread, in order.

    The loop forwards the harness's streams: an fsync there stalls every stream of the
    interceptor, and during a long outage they come every second.
    """
    loop_thread = threading.get_ident()
    on_loop: list[str] = []

    def watch(owner: type, name: str) -> None:
        original = getattr(owner, name)

        def watched(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == loop_thread:
                on_loop.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)

    for name in ("append", "read", "commit"):
        watch(Spool, name)
    watch(RejectedRecords, "add")
    broker = FakeBroker()
    broker.topic_limit = 100
    publisher = OnFakeBroker(tmp_path, broker, max_queue_records=2)
    async with publisher:
        broker.up = False
        for value in _values(5):  # the queue overflows: publish() hands records to the spool
            publisher.publish(b"k", value)
        await until(lambda: publisher.metrics.spooled >= 5)
        publisher.publish(b"k", b"x" * 200)  # no broker takes it: set aside
        publisher.publish(b"k", b"5")
        broker.up = True  # the spool drains: reads and commits
        await until(lambda: broker.log == _values(6) and publisher.metrics.rejected == 1)
    assert on_loop == []
    assert [r.value for r in RejectedRecords(tmp_path).read()] == [b"x" * 200]
