"""The trainer stream against a real broker: groups, staleness, commits, restarts, two trainers."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from rollstream.consumers.trainer import (
    Group,
    StreamPosition,
    TrainerSettings,
    TrajectoryStream,
    to_batch,
)
from rollstream.errors import BrokerError, ConfigurationError
from rollstream.kafka.parts import split
from rollstream.schemas import AvroRecord, AvroSerializer, PolicyVersion, Scored, TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ConsumerFactory, ProducerFactory
from tests.consumers.trainer.records import group_of, scored
from tests.kafka_reading import read_records
from tests.schemas.samples import oversized_segment
from tests.waiting import until

pytestmark = pytest.mark.integration

Placed = list[tuple[int, AvroRecord | bytes]]


async def produce(producer: AIOKafkaProducer, topic: str, placed: Placed) -> list[int]:
    """Write each value to its partition, in order; returns the offsets."""
    serializer = AvroSerializer()
    futures = []
    for partition, record in placed:
        value = record if isinstance(record, bytes) else serializer.encode(record)
        key = record.trajectory.group_id.encode() if isinstance(record, Scored) else None
        futures.append(await producer.send(topic, value, key=key, partition=partition))
    return [(await future).offset for future in futures]


def sentinel(name: str) -> Placed:
    """A group with one sample on each partition: delivered only once all three are read."""
    return [(p, r) for p, r in enumerate(group_of(name, 3))]


async def collect_until(stream: TrajectoryStream, last: str, timeout: float = 60) -> list[Group]:
    groups: list[Group] = []
    async with asyncio.timeout(timeout):
        async for group in stream.groups():
            groups.append(group)
            if group.group_id == last:
                return groups
    raise AssertionError("the stream ended")


def members(groups: list[Group]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for g in groups:
        assert g.group_id not in out, f"{g.group_id} delivered twice"
        out[g.group_id] = sorted(g.trajectory_ids)
    return out


def ids(records: list[Scored]) -> list[str]:
    return sorted(r.trajectory.trajectory_id for r in records)


async def test_groups_are_assembled_from_three_partitions_in_shuffled_order(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    consumer_factory: ConsumerFactory,
) -> None:
    rng = random.Random(7)
    a, b, c = group_of("a", 3), group_of("b", 2), group_of("c", 4)
    partial = group_of("p", 3)[:2]  # its third sample never comes
    placed: Placed = [(rng.randrange(3), r) for r in a + b + c + partial]
    rng.shuffle(placed)
    placed.append(placed[0])  # an at-least-once re-delivery
    placed.insert(rng.randrange(len(placed)), (1, b"not an avro record"))
    offsets = await produce(await producer_factory(), rollstream_topics.scored, placed)
    await produce(await producer_factory(), rollstream_topics.scored, sentinel("end"))

    async with TrajectoryStream(TrainerSettings(), "trainer-a", kafka_settings) as stream:
        got = await collect_until(stream, "end")
        assert members(got) == {
            "a": ids(a),
            "b": ids(b),
            "c": ids(c),
            "end": ids(group_of("end", 3)),
        }
        assert all(g.complete and g.task_id == f"task-{g.group_id}" for g in got)
        m = stream.metrics
        assert (m.delivered_groups, m.duplicates, m.undecodable) == (4, 1, 1)
        committed = await stream.commit()

    # Each partition is committed up to the end, except where a sample of the incomplete
    # group waits: there the commit stops at that sample, to be read again after a restart.
    ends = {p: 1 for p in range(3)}  # one sentinel sample per partition
    for (partition, _), offset in zip(placed, offsets, strict=True):
        ends[partition] = max(ends[partition], offset + 2)
    expected = dict(ends)
    for (partition, record), offset in zip(placed, offsets, strict=True):
        if isinstance(record, Scored) and record.trajectory.group_id == "p":
            expected[partition] = min(expected[partition], offset)
    topic = rollstream_topics.scored
    assert committed == {(topic, p): o for p, o in expected.items()}
    reader = await consumer_factory(group_id="trainer-a")
    for p, o in expected.items():
        assert await reader.committed(TopicPartition(topic, p)) == o


async def test_stale_groups_are_dropped_and_counted(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    old = group_of("old", 2, versions=[3, 5])  # oldest 3: two behind 5
    unversioned = group_of("none", 1, versions=[])  # counts as 0
    fresh = group_of("fresh", 2, versions=[4, 5])  # oldest 4: one behind
    placed: Placed = [(0, r) for r in old + unversioned + fresh]  # fresh comes last
    await produce(await producer_factory(), rollstream_topics.scored, placed)

    settings = TrainerSettings(max_staleness=1)
    async with TrajectoryStream(settings, "trainer-s", kafka_settings) as stream:
        published = await stream.publish_policy_version(5)
        assert stream.policy_version == 5 and published.publisher == "trainer-s"
        got = await collect_until(stream, "fresh")
        assert [g.group_id for g in got] == ["fresh"]
        assert stream.metrics.dropped_stale == 2 and stream.metrics.dropped_records == 3
        assert await stream.commit() == {(rollstream_topics.scored, 0): 5}
    [control] = await read_records(kafka_settings, rollstream_topics.control, PolicyVersion, 1)
    assert (control.version, control.publisher) == (5, "trainer-s")


async def test_a_restarted_stream_resumes_from_its_committed_offsets(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    topic = rollstream_topics.scored
    producer = await producer_factory()
    g1, g2, p, g3 = group_of("g1", 3), group_of("g2", 2), group_of("p", 2), group_of("g3", 1)
    first: Placed = [(0, g1[0]), (1, g1[1]), (2, g1[2]), (0, g2[0]), (1, g2[1]), (0, p[0])]
    offsets = await produce(producer, topic, first + sentinel("end1"))

    async with TrajectoryStream(TrainerSettings(), "trainer-r", kafka_settings) as stream:
        assert members(await collect_until(stream, "end1")).keys() == {"g1", "g2", "end1"}
        committed = await stream.commit()
    # Partition 0 stops at p's first sample, which is still waiting for its group.
    assert committed == {(topic, 0): offsets[5], (topic, 1): 3, (topic, 2): 2}

    await produce(producer, topic, [(1, p[1]), (2, g3[0]), *sentinel("end2")])
    async with TrajectoryStream(TrainerSettings(), "trainer-r", kafka_settings) as stream:
        got = await collect_until(stream, "end2")
        # Not g1, g2 or end1 (committed); p with the sample read before the restart.
        assert members(got) == {"p": ids(p), "g3": ids(g3), "end2": ids(group_of("end2", 3))}
        assert stream.metrics.delivered_groups == 3


async def test_a_checkpointed_position_resumes_exactly_once(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    topic = rollstream_topics.scored
    producer = await producer_factory()
    p, g = group_of("p", 2), group_of("g", 2)
    # g lies past p's first sample: a commit cannot cover it while p is incomplete.
    await produce(producer, topic, [(0, p[0]), (0, g[0]), (0, g[1]), *sentinel("end1")])
    async with TrajectoryStream(TrainerSettings(), "trainer-c", kafka_settings) as stream:
        assert members(await collect_until(stream, "end1")).keys() == {"g", "end1"}
        await stream.commit()
        checkpoint = stream.positions().model_dump_json()  # saved with the weights
    await produce(producer, topic, [(1, p[1]), *sentinel("end2")])

    # From the committed offsets: at-least-once, g comes again.
    async with TrajectoryStream(TrainerSettings(), "trainer-c", kafka_settings) as stream:
        assert members(await collect_until(stream, "end2")).keys() == {"p", "g", "end2"}

    # From the checkpoint: exactly once, only what was not delivered before.
    position = StreamPosition.model_validate_json(checkpoint)
    assert position.offsets[(topic, 0)] == 0
    async with TrajectoryStream(
        TrainerSettings(), "trainer-c2", kafka_settings, start_offsets=position
    ) as stream:
        got = await collect_until(stream, "end2")
        assert members(got) == {"p": ids(p), "end2": ids(group_of("end2", 3))}
        # It started at the saved offsets (partition 0 from p's first sample, the others
        # past end1) and skipped what the checkpoint names: g and end1's first sample.
        assert (stream.metrics.duplicates, stream.metrics.late) == (3, 0)


async def test_two_trainers_each_receive_everything_at_their_own_pace(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    groups = [group_of(f"g{i}", 2) for i in range(5)]
    placed: Placed = [(i % 3, r) for i, g in enumerate(groups) for r in g]
    await produce(await producer_factory(), rollstream_topics.scored, placed + sentinel("end"))
    everything = {f"g{i}" for i in range(5)} | {"end"}

    async with (
        TrajectoryStream(TrainerSettings(), "trainer-fast", kafka_settings) as fast,
        TrajectoryStream(TrainerSettings(), "trainer-slow", kafka_settings) as slow,
    ):
        slow_groups = [await anext(slow.groups())]  # then it stalls, as in a long step
        assert members(await collect_until(fast, "end")).keys() == everything
        slow_groups += await collect_until(slow, "end")
        assert members(slow_groups).keys() == everything


async def test_trajectory_records_are_read_as_unscored_groups(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    bare = [scored("t", i, with_task=False).trajectory for i in range(2)]
    await produce(await producer_factory(), rollstream_topics.trajectories, [(2, t) for t in bare])
    settings = TrainerSettings(topic="trajectories", group_size=2)
    async with TrajectoryStream(settings, "trainer-t", kafka_settings) as stream:
        async with asyncio.timeout(60):
            group = await anext(stream.groups())
    assert group.rewards == [None, None] and group.size == 2
    assert [r.trajectory for r in group.records] == bare
    assert not to_batch(group).advantages.any()


async def test_an_incomplete_group_is_yielded_partial_after_the_timeout(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    partial = group_of("p", 3)[:2]
    await produce(await producer_factory(), rollstream_topics.scored, [(0, r) for r in partial])
    settings = TrainerSettings(group_timeout_s=1.0, incomplete="yield")
    async with TrajectoryStream(settings, "trainer-p", kafka_settings) as stream:
        async with asyncio.timeout(30):
            group = await anext(stream.groups())
        assert not group.complete and sorted(group.trajectory_ids) == ids(partial)
        assert stream.metrics.partial_groups == 1


async def test_batches_mode_yields_plain_batches(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    records = group_of("a", 3) + group_of("b", 3)
    await produce(await producer_factory(), rollstream_topics.scored, [(1, r) for r in records])
    settings = TrainerSettings(mode="batches", batch_size=4)
    async with TrajectoryStream(settings, "trainer-b", kafka_settings) as stream:
        async with asyncio.timeout(30):
            batch = await anext(stream.batches())
        assert list(batch.records) == records[:4]
        assert await stream.commit() == {(rollstream_topics.scored, 1): 4}


async def test_task_less_and_unusable_records_are_skipped_and_a_restart_does_not_meet_them(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = rollstream_topics.scored
    bare = scored("bare", 0, with_task=False)  # names a group, but its size is unknown
    hand = scored("", 0, with_task=False)  # calls recorded under `anonymous`
    hand = hand.model_copy(
        update={
            "trajectory": hand.trajectory.model_copy(
                update={"task_id": "", "group_id": "", "session_id": "anonymous"}
            )
        }
    )
    odd = scored("odd", 0, samples=1)  # its handling fails (below)
    placed: Placed = [(0, bare), *[(0, r) for r in group_of("a", 2)], (0, hand), (0, odd)]
    placed += [(0, r) for r in group_of("b", 2)]
    offsets = await produce(await producer_factory(), topic, placed)
    odd_bytes = AvroSerializer().encode(odd)

    async with TrajectoryStream(TrainerSettings(), "trainer-tl", kafka_settings) as stream:
        decode = stream._serializer.decode

        def failing(data: bytes) -> AvroRecord:
            if data == odd_bytes:
                raise RuntimeError("a failure nobody foresaw")
            return decode(data)

        monkeypatch.setattr(stream._serializer, "decode", failing)
        got = await collect_until(stream, "b")
        assert [g.group_id for g in got] == ["a", "b"]
        assert (stream.metrics.taskless, stream.metrics.unusable) == (2, 1)
        assert await stream.commit() == {(topic, 0): offsets[-1] + 1}

    await produce(await producer_factory(), topic, [(0, r) for r in group_of("c", 1)])
    async with TrajectoryStream(TrainerSettings(), "trainer-tl", kafka_settings) as stream:
        assert [g.group_id for g in await collect_until(stream, "c")] == ["c"]
        assert (stream.metrics.taskless, stream.metrics.unusable) == (0, 0)


async def test_without_the_topic_the_stream_says_so(kafka_settings: KafkaSettings) -> None:
    with pytest.raises(ConfigurationError, match="scored"):
        await TrajectoryStream(TrainerSettings(), "trainer-x", kafka_settings).start()


async def test_a_failure_taking_fetched_records_asks_for_a_restart_not_a_retry(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading on past a batch the stream failed to take would commit past records it never
    took: every later read fails too, and the error's flag says a retry will not help."""
    await produce(await producer_factory(), rollstream_topics.scored, sentinel("g"))
    async with TrajectoryStream(TrainerSettings(), "trainer-f", kafka_settings) as stream:

        def broken(now: float) -> None:
            raise RuntimeError("assembler broke")

        monkeypatch.setattr(stream._assembler, "expire", broken)
        for _ in range(2):
            with pytest.raises(BrokerError, match="restart the stream") as failed:
                async with asyncio.timeout(30):
                    while True:
                        await anext(stream)
            assert failed.value.retriable is False


async def test_a_checkpointed_position_holds_through_a_rebalance_until_a_commit(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """A rank joining (and leaving) after a resume: the checkpoint's partitions are not skipped.

    Before: the checkpoint's offsets were sought once; the rebalance placed the partitions at
    the group's committed offset, past what the checkpoint had trained, and "b" was lost.
    """
    topic = rollstream_topics.scored
    producer = await producer_factory()
    await produce(producer, topic, [*sentinel("a"), *sentinel("b")])
    async with TrajectoryStream(TrainerSettings(), "trainer-rb", kafka_settings) as stream:
        await collect_until(stream, "a")
        checkpoint = stream.positions()  # saved with the weights trained on "a"
        await collect_until(stream, "b")
        await stream.commit()  # then the process died before its next checkpoint

    def held(*streams: TrajectoryStream) -> list[int]:
        return [len(s._require().assignment()) for s in streams]

    async with TrajectoryStream(
        TrainerSettings(), "trainer-rb", kafka_settings, start_offsets=checkpoint
    ) as resumed:
        await until(lambda: held(resumed) == [3], timeout=60, what="the resumed stream's join")
        async with TrajectoryStream(TrainerSettings(), "trainer-rb", kafka_settings) as rank:
            await until(
                lambda: sorted(held(resumed, rank)) == [1, 2], timeout=60, what="a rebalance"
            )
        await until(lambda: held(resumed) == [3], timeout=60, what="the rank's leave")
        got = await collect_until(resumed, "b")
        assert members(got) == {"b": ids(group_of("b", 3))}


async def test_a_record_in_parts_is_delivered_whole_and_a_restart_inside_it_skips_its_rest(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
) -> None:
    """Sample 0 of group a is over the record budget, written in two parts with g's first
    sample between them (another writer's transaction). The stream delivers a whole and commits
    at g's sample, which waits for its group; restarted there, it reads a's second part alone,
    which it leaves out: a is not delivered twice, nothing is counted unusable."""
    topic = rollstream_topics.scored
    producer = await producer_factory()
    serializer = AvroSerializer()
    a, g = group_of("a", 2), group_of("g", 2)
    segment = oversized_segment()
    big = a[0].model_copy(
        update={"trajectory": a[0].trajectory.model_copy(update={"segments": [segment]})}
    )
    first, second = split(b"a", serializer.encode(big))
    for value, headers in (first, (serializer.encode(g[0]), ()), second):
        await producer.send(topic, value, key=b"a", partition=0, headers=list(headers) or None)
    await produce(producer, topic, [(1, a[1]), *sentinel("end1")])

    async with TrajectoryStream(TrainerSettings(), "trainer-parts", kafka_settings) as stream:
        got = await collect_until(stream, "end1")
        assert members(got).keys() == {"a", "end1"}
        [delivered] = [s for s in got[0].records if s.trajectory.sample_index == 0]
        assert delivered.trajectory.segments == [segment]
        committed = await stream.commit()
    assert committed[(topic, 0)] == 1  # g's first sample, not past it, not before it

    await produce(producer, topic, [(1, g[1]), *sentinel("end2")])
    async with TrajectoryStream(TrainerSettings(), "trainer-parts", kafka_settings) as stream:
        assert members(await collect_until(stream, "end2")) == {
            "g": ids(g),
            "end2": ids(group_of("end2", 3)),
        }
        assert (stream.metrics.unusable, stream.metrics.duplicates) == (0, 0)
