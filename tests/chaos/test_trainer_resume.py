"""A trainer resumed from a checkpoint while ranks join and leave its group (issue 36, point 3).

Twelve groups, each with a sample on every partition of the scored topic. A trainer trains on
four, checkpoints (``positions()``), reads on, commits, and dies before its next checkpoint. It
resumes from that checkpoint while another rank joins the group and leaves again, twice: each
join and leave is a rebalance that places the partitions anew. Counted: the groups the resumed
trainer yields must be exactly the eight after the checkpoint, each once (before the fix, the
first rebalance placed the partitions at the group's committed offset, past the checkpoint).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rollstream.consumers.trainer import Group, TrainerSettings, TrajectoryStream
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.trainer.test_stream import collect_until, produce, sentinel
from tests.fault_table import ChaosReport
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

GROUPS = [f"g{i:02d}" for i in range(12)]
TRAINED = 4  # groups in the checkpoint
GROUP = "trainer-chaos-resume"


def _held(stream: TrajectoryStream) -> int:
    return len(stream._require().assignment())


async def _rank_joins_and_leaves(kafka: KafkaSettings, resumed: TrajectoryStream) -> None:
    """Another rank joins (taking partitions from the resumed trainer), then leaves."""
    async with TrajectoryStream(TrainerSettings(), GROUP, kafka) as rank:
        await until(lambda: _held(rank) > 0, timeout=60, what="the rank's join")
    await until(lambda: _held(resumed) == 3, timeout=60, what="the rank's leave")


async def test_a_resumed_trainer_trains_each_group_after_its_checkpoint_once(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    chaos_report: ChaosReport,
) -> None:
    placed = [p for name in GROUPS for p in sentinel(name)]
    await produce(await producer_factory(), rollstream_topics.scored, placed)
    async with TrajectoryStream(TrainerSettings(), GROUP, kafka_settings) as first:
        await collect_until(first, GROUPS[TRAINED - 1])
        checkpoint = first.positions()  # saved with the weights
        await collect_until(first, GROUPS[-1])
        await first.commit()  # then the process dies before its next checkpoint

    yielded: list[Group] = []
    rebalances = 0
    async with TrajectoryStream(
        TrainerSettings(), GROUP, kafka_settings, start_offsets=checkpoint
    ) as resumed:
        await until(lambda: _held(resumed) == 3, timeout=60, what="the resumed trainer's join")

        async def train() -> None:
            async for group in resumed.groups():
                yielded.append(group)
                if group.group_id == GROUPS[-1]:
                    return

        training = asyncio.create_task(train())
        for _ in range(2):
            await _rank_joins_and_leaves(kafka_settings, resumed)
            rebalances += 2
        async with asyncio.timeout(120):
            await training
    counts = Counter(g.group_id for g in yielded)
    after = GROUPS[TRAINED:]
    lost = sum(1 for name in after if counts[name] == 0)
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    chaos_report(
        fault="trainer resumed from a checkpoint; another rank joins and leaves its group twice "
        "(issue 36, point 3)",
        load=f"{len(GROUPS)} groups on 3 partitions, {TRAINED} in the checkpoint, "
        f"{rebalances} rebalances while the resumed trainer reads",
        lost=lost,
        duplicated=duplicated,
        errors="0",
    )
    assert lost == 0 and duplicated == 0
    assert sorted(counts) == after  # none of the checkpoint's groups trained again
