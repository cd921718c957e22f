"""A trainer fed task-less and poison records between real groups: it keeps yielding groups.

Whole GRPO groups (each with its task) go to the scored topic's three partitions, and between
them, and inside some of them, records a trainer cannot train on: trajectories without their
task (one naming a group, one recorded under the ``anonymous`` session as calls made through an
interceptor used by hand, one a bare Trajectory record), bytes that are no record, an empty
value, a record cut in half, a record naming an unknown schema, a tombstone and a record of
another type. A TrajectoryStream with default settings reads them as a trainer does (commit
after each group), is stopped half-way and a new stream in the same consumer group takes over,
as a restarted trainer would. Counted: groups never yielded (lost) and groups yielded twice
across the restart (duplicated). Before issue 19 the first task-less trajectory raised inside
``__anext__`` and the restarted stream met it again: a crash loop.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses

import pytest

from rollstream.consumers.trainer import StreamMetrics, TrainerSettings, TrajectoryStream
from rollstream.schemas import AvroRecord, AvroSerializer, TopicNames
from rollstream.schemas.serializer import HEADER_LEN, MAGIC
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.trainer.records import group_of, scored
from tests.fault_table import ChaosReport
from tests.schemas.samples import TASK

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

GROUPS = 24
SAMPLES = 3
CONSUMER_GROUP = "chaos-trainer"
SERIALIZER = AvroSerializer()
Value = AvroRecord | bytes | None
SKIPPED = ("taskless", "undecodable", "unusable")  # StreamMetrics' counts of skipped records


def unusable(n: int) -> Value:
    """The ``n``-th record a trainer cannot train on, cycling through every kind."""
    good = SERIALIZER.encode(scored(f"poison-{n}", 0))
    hand = scored("", n, with_task=False)
    anonymous = hand.trajectory.model_copy(
        update={"task_id": "", "group_id": "", "session_id": "anonymous"}
    )
    kinds: list[Value] = [
        scored(f"taskless-{n}", 0, with_task=False),  # names a group, but not its size
        hand.model_copy(update={"trajectory": anonymous}),  # the interceptor used by hand
        scored(f"bare-{n}", 0, with_task=False).trajectory,  # a Trajectory record, no task
        b"\x00\x01 this is not a record",
        b"",
        good[: len(good) // 2],
        MAGIC + b"\xde\xad\xbe\xef\xde\xad\xbe\xef" + good[HEADER_LEN:],
        None,
        TASK,  # a record of another type
    ]
    return kinds[n % len(kinds)]


def placements() -> tuple[list[tuple[int, bytes, Value]], list[str]]:
    """(partition, key, value) in writing order, and the groups written."""
    placed: list[tuple[int, bytes, Value]] = []
    names = []
    poison = 0
    for g in range(GROUPS):
        name = f"chaos-g{g:02d}"
        names.append(name)
        partition = g % 3
        records: list[Value] = list(group_of(name, SAMPLES, rewards=[1.0, 0.0, 0.5]))
        if g % 4 == 1:  # poison inside the group, between its samples
            records.insert(1, unusable(poison))
            poison += 1
        records.append(unusable(poison))  # and between groups
        poison += 1
        placed += [(partition, name.encode(), value) for value in records]
    return placed, names


async def run_trainer(
    kafka: KafkaSettings, yielded: list[str], until: int, metrics: list[StreamMetrics]
) -> str | None:
    """One trainer process: commit after each group, stop once ``until`` groups were seen.

    Returns what stopped it early (an exception's name), None when it reached ``until``.
    """
    stream = TrajectoryStream(TrainerSettings(), CONSUMER_GROUP, kafka)
    try:
        async with stream, asyncio.timeout(60):
            async for group in stream.groups():
                yielded.append(group.group_id)
                await stream.commit()  # after the training step
                if len(set(yielded)) >= until:
                    break
    except Exception as exc:  # a trainer that dies is what this row counts
        return type(exc).__name__
    finally:
        metrics.append(stream.metrics)
    return None


async def test_a_trainer_skips_task_less_and_poison_records_across_a_restart(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    chaos_report: ChaosReport,
) -> None:
    placed, names = placements()
    producer = await producer_factory()
    futures = []
    for partition, key, value in placed:
        raw = SERIALIZER.encode(value) if isinstance(value, AvroRecord) else value
        sent = await producer.send(rollstream_topics.scored, raw, key=key, partition=partition)
        futures.append(sent)
    for future in futures:
        await future
    poison = len(placed) - GROUPS * SAMPLES

    yielded: list[str] = []
    metrics: list[StreamMetrics] = []
    errors = [
        await run_trainer(kafka_settings, yielded, GROUPS // 2, metrics),
        await run_trainer(kafka_settings, yielded, GROUPS, metrics),  # the restarted trainer
    ]

    counts = collections.Counter(yielded)
    lost = sum(1 for name in names if name not in counts)
    duplicated = sum(n - 1 for n in counts.values())
    died = [e for e in errors if e is not None]
    counted = [dataclasses.asdict(m) for m in metrics]
    skipped = {kind: sum(c.get(kind, 0) for c in counted) for kind in SKIPPED}
    seen = ", ".join(f"{n} {kind}" for kind, n in skipped.items() if n)
    chaos_report(
        fault="task-less and poison records in scored, trainer restarted mid-run",
        load=f"{GROUPS} groups of {SAMPLES} on 3 partitions, {poison} unusable records",
        lost=lost,
        duplicated=duplicated,
        errors=(f"{len(died)} trainer deaths ({', '.join(died)})" if died else "0")
        + (f"; skipped and counted: {seen}" if seen else ""),
    )
    assert died == [] and lost == 0 and duplicated == 0
    # Each skipped and counted (some twice: those read past the first trainer's last commit).
    assert sum(skipped.values()) >= poison
