"""What ``bench instances`` needs to start several instances on the same input at once.

Instances of a service start one after another (each a Python process importing rollstream),
and the first to join its group would take every partition and work alone until the others
come: that would measure start-up, not throughput. So the input waits, complete, inside one
open transaction (:class:`Gate`): ``read_committed`` consumers see none of it until the
transaction commits. Meanwhile :class:`GroupWatch` follows the group (DescribeGroups) until
every instance has joined and holds partitions, then notes any rebalance during the run.
:func:`gated` starts a count behind the gate and :func:`measure` takes its rate; each count
has topics of its own (:func:`count_topics`), dropped after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from rollstream.dev.bench.common import process_cpu_seconds
from rollstream.dev.bench.pipeline_run import PipelineRun, ServiceProcess, bench_group
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_admin, make_producer
from rollstream.schemas import TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings

Sample = tuple[float, float, float, float]
Records = list[tuple[bytes, bytes]]
Progress = Callable[[str], None]

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


def measure(
    services: list[ServiceProcess], opened: float, times: list[float], weights: list[int]
) -> dict[str, Any]:
    """Units/s from the gate's opening to the last output, in all and per instance; CPU each.

    The whole span counts, the first batch's work included: every instance starts at the
    gate, so a rate counted from the first output instead would credit the others with the
    work they did before it.
    """
    last = max(times)
    total = sum(weights)
    span = last - opened
    cpu = [service.cpu_between(opened, last) for service in services]
    waited = [service.waited_between(opened, last) for service in services]
    per_s = total / span if span > 0 and total else None
    return {
        "instances": len(services),
        "per_s": round(per_s) if per_s else None,
        "per_instance_s": round(per_s / len(services)) if per_s else None,
        "measured": total,
        "span_s": round(span, 3),
        "first_output_s": round(min(times) - opened, 3),
        "cpu_s": [round(c, 2) for c in cpu],
        "cpu_utilisation": [round(c / span, 3) if span > 0 else None for c in cpu],
        "cpu_wait_share": [round(w / span, 3) if span > 0 else None for w in waited],
        "cpu_ms_per_unit": round(sum(cpu) / total * 1000, 4) if total else None,
        "rss_mb": [round(service.peak_rss(last), 1) for service in services],
    }


async def _ready(
    run: PipelineRun, watch: GroupWatch, services: list[ServiceProcess], settle_s: float
) -> list[int]:
    """Until the group is stable with every instance, each idle; partitions per instance."""
    n = len(services)
    await run.wait_until(
        lambda: watch.stable_with(n),
        lambda: f"group {watch.group}: {watch.state}, {len(watch.members)} of {n} members",
    )
    await asyncio.sleep(settle_s)
    await run.wait_until(
        lambda: all(idle(s.samples) for s in services) and watch.stable_with(n),
        lambda: f"{n} instances of group {watch.group} not idle and stable",
    )
    return sorted(watch.mark().values(), reverse=True)


@dataclass(frozen=True)
class Phase:
    """One service's part of a count: its input, its command line, when its output is in."""

    service: str
    topic: str
    records: Records
    args: Callable[[str], list[str]]  # the command line for a group
    done: Callable[[], bool]


def _cpu(pids: tuple[int, ...]) -> tuple[float, float | None]:
    """CPU seconds so far of this process, and the sum of ``pids``' (None without pids)."""
    brokers = sum(process_cpu_seconds(pid) for pid in pids) if pids else None
    return time.process_time(), brokers


async def gated(
    run: PipelineRun,
    phase: Phase,
    n: int,
    settle_s: float,
    progress: Progress,
    broker_pids: tuple[int, ...],
) -> tuple[list[ServiceProcess], float, dict[str, Any]]:
    """``n`` instances behind a gate on the phase's input, opened once they are ready.

    Returns the instances, when the gate opened, and what the count's results add: partitions
    each, rebalances seen, and the cores this process (the reader and the gate) and the broker
    (None: not measured) used from the opening until the output was all in.
    """
    group = bench_group(run.kafka, phase.service)
    began = time.perf_counter()
    async with Gate(run.kafka, f"{group}-gate") as gate:
        await gate.fill(phase.topic, phase.records)
        filled = time.perf_counter()
        args = phase.args(group)
        services = [run.start_service(f"{phase.service}-{i + 1}", *args) for i in range(n)]
        async with GroupWatch(run.kafka, group) as watch:
            partitions = await _ready(run, watch, services, settle_s)
            before = _cpu(broker_pids)
            opened = await gate.open()
            await run.wait_until(
                phase.done, lambda: f"{phase.service}: output of {n} instances incomplete"
            )
            after, span = _cpu(broker_pids), time.perf_counter() - opened
            extra = {
                "partitions": partitions,
                "rebalanced": watch.rebalanced,
                "reader_cores": round((after[0] - before[0]) / span, 3),
                "broker_cores": None
                if after[1] is None or before[1] is None
                else round((after[1] - before[1]) / span, 3),
            }
            progress(
                f"    {phase.service}: input written in {filled - began:.1f} s, {n} instance(s) "
                f"ready {opened - filled:.1f} s later, done {time.perf_counter() - opened:.1f} s "
                "after the gate opened"
            )
            return services, opened, extra
