"""What ``bench instances`` needs to start several instances on the same input at once.

Instances of a service start one after another (each a Python process importing rollstream),
and the first to join its group would take every partition and work alone until the others
come: that would measure start-up, not throughput. So the input waits, complete, inside one
open transaction (:class:`Gate`): ``read_committed`` consumers see none of it until the
transaction commits. Meanwhile :class:`GroupWatch` follows the group (DescribeGroups) until
every instance has joined and holds partitions, then notes any rebalance during the run.
Each count has topics of its own (:func:`count_topics`), dropped after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_admin, make_producer
from rollstream.schemas import TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings

Sample = tuple[float, float, float, float]

#: The scorer's input topic (a logical name under each count's prefix).
SCORER_INPUT = "trajectories.gated"

# Long enough for the instances to start and join behind it (the broker allows 15 min).
_GATE_TIMEOUT_MS = 600_000


class Gate:
    """Records written inside one open transaction, readable once :meth:`open` commits it."""

    def __init__(self, kafka: KafkaSettings, transactional_id: str) -> None:
        self.producer: AIOKafkaProducer = make_producer(
            kafka, transactional_id=transactional_id, transaction_timeout_ms=_GATE_TIMEOUT_MS
        )
        self.opened = False

    async def __aenter__(self) -> Gate:
        await self.producer.start()
        await self.producer.begin_transaction()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.opened:
            with contextlib.suppress(Exception):
                await self.producer.abort_transaction()
        await self.producer.stop()

    async def fill(self, topic: str, records: list[tuple[bytes, bytes]]) -> None:
        """Write ``records`` (key, value) into the open transaction, every one acknowledged."""
        futures = [await self.producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)

    async def open(self) -> float:
        """Commit: everything written becomes readable. Returns when the commit was asked."""
        began = time.perf_counter()
        await self.producer.commit_transaction()
        self.opened = True
        return began


def member_partitions(description: dict[str, Any]) -> dict[str, int]:
    """Each member of one DescribeGroups entry with the number of partitions assigned to it."""
    out = {}
    for member in description["members"]:
        raw = member["member_assignment"]
        assignment = ConsumerProtocolMemberAssignment.decode(raw) if raw else None
        out[member["member_id"]] = len(assignment.partitions()) if assignment else 0
    return out


class GroupWatch:
    """A consumer group's state and members, polled every 100 ms in the background.

    :meth:`stable_with` tells when the group is ready; :meth:`mark` takes that membership as
    the reference, and ``rebalanced`` counts the polls that saw it otherwise afterwards.
    """

    def __init__(self, kafka: KafkaSettings, group: str) -> None:
        self.group = group
        self.admin = make_admin(kafka)
        self.state = "unknown"
        self.members: dict[str, int] = {}
        self.rebalanced = 0
        self._reference: dict[str, int] | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GroupWatch:
        await self.admin.start()
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.admin.close()

    def stable_with(self, members: int) -> bool:
        """Whether the group is Stable with ``members`` members, each holding partitions."""
        return (
            self.state == "Stable" and len(self.members) == members and all(self.members.values())
        )

    def mark(self) -> dict[str, int]:
        """Take the membership now as the reference; return it (partitions per member)."""
        self._reference = dict(self.members)
        return self._reference

    async def _poll(self) -> None:
        while True:
            try:
                (response,) = await self.admin.describe_consumer_groups([self.group])
                (description,) = response.to_object()["groups"]
            except Exception:  # the coordinator moving or loading: try again
                self.state = "unknown"
            else:
                self.state = description["state"] if not description["error_code"] else "unknown"
                self.members = member_partitions(description)
            if self._reference is not None and (
                self.state != "Stable" or self.members != self._reference
            ):
                self.rebalanced += 1
            await asyncio.sleep(0.1)


def idle(samples: Sequence[Sample], window_s: float = 0.5, share: float = 0.1) -> bool:
    """Whether a service used under ``share`` of a core over the last ``window_s`` seconds.

    ``samples`` are its :attr:`ServiceProcess.samples`: (time, CPU seconds, RSS, waited).
    A joined instance still starts a producer per partition and loads its state; once it only
    polls, it is ready for the input.
    """
    now = time.perf_counter()
    recent = [s for s in samples if s[0] >= now - window_s]
    if len(recent) < 2:
        return False
    (t0, cpu0, *_), (t1, cpu1, *_) = recent[0], recent[-1]
    return t1 - t0 >= window_s / 2 and (cpu1 - cpu0) / (t1 - t0) < share


def count_topics(prefix: str, partitions: int) -> list[TopicSpec]:
    """Every topic of one count, and the scorer's gated input configured like trajectories."""
    names = TopicNames(prefix)
    specs = topic_specs(names, partitions=partitions)
    trajectories = next(s for s in specs if s.name == names.trajectories)
    return [*specs, replace(trajectories, name=names.resolve(SCORER_INPUT))]


async def wait_visible(kafka: KafkaSettings, specs: list[TopicSpec], timeout: float) -> None:
    """Until every partition of ``specs`` has a leader: a busy broker takes a while.

    The reader and the gate's producer look their topics up right after creation; without
    this they find none, or retry their first sends for a while.
    """
    admin = make_admin(kafka)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while not _led(await admin.describe_topics([s.name for s in specs]), specs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the topics have no leaders after {timeout} s")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


def _led(described: list[dict[str, Any]], specs: list[TopicSpec]) -> bool:
    """Whether every topic of ``specs`` is described with all its partitions led."""
    led = {
        t["topic"]: sum(1 for p in t["partitions"] if p["leader"] >= 0)
        for t in described
        if not t["error_code"]
    }
    return all(led.get(s.name, 0) >= s.partitions for s in specs)


async def drop_topics(kafka: KafkaSettings, specs: list[TopicSpec]) -> None:
    """Delete one count's topics: the next count need not share the broker's disk with them."""
    async with TopicAdmin(kafka) as admin:
        await admin.delete(s.name for s in specs)
