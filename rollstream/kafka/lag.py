"""How far each consumer group is behind: data records not yet consumed, markers not counted.

``rollstream status`` prints it and the console shows it live.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from rollstream.kafka.clients import make_admin, make_consumer
from rollstream.settings import KafkaSettings


@dataclass(frozen=True)
class GroupLag:
    """How far a consumer group is behind on one topic (records not yet consumed)."""

    group: str
    topic: str
    lag: int


async def group_lags(kafka: KafkaSettings, topics: set[str]) -> list[GroupLag]:
    """The lag of every consumer group with committed offsets on ``topics``."""
    admin = make_admin(kafka)
    consumer = make_consumer(kafka)
    await admin.start()
    try:
        await consumer.start()
    except BaseException:
        await admin.close()
        raise
    try:
        lags: list[GroupLag] = []
        for group, _protocol in sorted(await admin.list_consumer_groups()):
            committed = await admin.list_consumer_group_offsets(group)
            mine = {tp: meta.offset for tp, meta in committed.items() if tp.topic in topics}
            if not mine:
                continue
            ends = await consumer.end_offsets(list(mine))
            behind = {tp: (offset, ends[tp]) for tp, offset in mine.items() if ends[tp] > offset}
            counted = await records_between(consumer, behind)
            per_topic: dict[str, int] = {tp.topic: 0 for tp in mine}
            for tp, n in counted.items():
                per_topic[tp.topic] += n
            lags += [GroupLag(group, t, n) for t, n in sorted(per_topic.items())]
        return lags
    finally:
        await consumer.stop()
        await admin.close()


async def records_between(
    consumer: AIOKafkaConsumer,
    ranges: dict[TopicPartition, tuple[int, int]],
    timeout_s: float = 3.0,
    cap: int = 10_000,
) -> dict[TopicPartition, int]:
    """The data records in ``[start, end)`` of each partition, read.

    Offsets alone overcount: a transaction's commit marker takes an offset, so a group that
    consumed everything a transactional writer wrote is one offset short per transaction. A
    range larger than ``cap``, or not read within the timeout, is counted by its offsets.
    """
    counts = {tp: end - start for tp, (start, end) in ranges.items()}
    small = {tp: r for tp, r in ranges.items() if r[1] - r[0] <= cap}
    if not small:
        return counts
    consumer.assign(list(small))
    consumer.resume(*small)  # paused by the previous group's count
    for tp, (start, _) in small.items():
        consumer.seek(tp, start)
    seen = dict.fromkeys(small, 0)
    pending = set(small)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    # A deadline checked between polls, not asyncio.timeout: a cancellation landing inside
    # aiokafka's getmany can be absorbed there, and the loop would then never end.
    try:
        while pending and loop.time() < deadline:
            batch = await consumer.getmany(*pending, timeout_ms=200)
            for tp, messages in batch.items():
                seen[tp] += sum(1 for m in messages if m.offset < small[tp][1])
            for tp in list(pending):
                position = await asyncio.wait_for(consumer.position(tp), 1.0)
                if position >= small[tp][1]:
                    pending.discard(tp)
    except TimeoutError:
        pass  # what is still pending is counted by its offsets
    finally:
        consumer.pause(*small)  # nothing left fetching meanwhile (assign([]) hangs aiokafka)
    for tp in small:
        if tp not in pending:  # read to its end: the exact count
            counts[tp] = seen[tp]
    return counts
