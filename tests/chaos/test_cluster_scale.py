"""Several of everything on the three-node cluster: rollout nodes and consumer instances.

Two rollout nodes, each with its own interceptor, share the tasks (one consumer group on six
partitions); a third joins mid-run, a second wave of tasks follows, and the first node leaves
(SIGTERM) once the new one runs sessions.
Three reconstructors and two scorers share six partitions; one of each is SIGKILLed under load
and one more of each is added. Counted afterwards: every sample completed exactly once, every
session has one trajectory and one score, every call the backend served is recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.dev.broker import LocalCluster
from rollstream.settings import KafkaSettings
from tests.chaos.cluster_run import Outcome, cluster_pipeline
from tests.chaos.conftest import ChaosReport
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

TASKS = 18
SAMPLES = 2


def _report(chaos_report: ChaosReport, fault: str, load: str, outcome: Outcome) -> None:
    lost = outcome.lost_calls + outcome.lost_trajectories + outcome.lost_scores
    duplicated = outcome.duplicated_trajectories + outcome.duplicated_scores + outcome.samples_twice
    errors = len(outcome.failed_sessions) + outcome.failed_calls
    cancelled = len(outcome.cancelled_sessions)
    seen = f"{errors}; {cancelled} sessions cancelled by the leave, run again" if cancelled else ""
    chaos_report(
        fault=fault, load=load, lost=lost, duplicated=duplicated, errors=seen or str(errors)
    )
    assert outcome.calls_ok == outcome.calls_served, outcome
    assert lost == 0 and duplicated == 0, outcome
    assert errors == 0 and not outcome.not_complete, outcome


@pytest.mark.timeout(900)
async def test_nodes_with_own_interceptors_join_and_leave_every_sample_once(
    kafka_cluster: LocalCluster,
    cluster_settings: KafkaSettings,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    wave = TASKS // 2
    async with cluster_pipeline(
        kafka_cluster, cluster_settings, tmp_path, nodes=2, max_run=4
    ) as run:
        await run.submit(wave, SAMPLES)
        await run.until_ended(6)
        joined = await run.add("node")
        # The second wave after the join: the six partitions are spread over three nodes.
        await run.submit(wave, SAMPLES, first=wave)

        async def joined_runs() -> bool:
            await run.poll()
            return run.started_on(joined) > 0

        await until(joined_runs, 120, f"{joined} starts a session", interval=0.2)
        run.leave("node-1")
        outcome = await run.drain(TASKS * SAMPLES)
    _report(
        chaos_report,
        "2 nodes with own interceptors; node-3 joins, node-1 leaves (SIGTERM) mid-run",
        f"{TASKS} tasks x {SAMPLES} samples in two waves on 6 partitions; sessions per node "
        f"{dict(sorted(outcome.by_node.items()))}",
        outcome,
    )
    assert set(outcome.by_node) == {"node-1", "node-2", joined}, outcome.by_node
    # Every sample once, plus a new session for each one the leave cancelled.
    cancelled = len(outcome.cancelled_sessions)
    assert sum(outcome.by_node.values()) == TASKS * SAMPLES + cancelled


@pytest.mark.timeout(900)
async def test_consumer_instances_killed_and_added_one_trajectory_and_score_each(
    kafka_cluster: LocalCluster,
    cluster_settings: KafkaSettings,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    async with cluster_pipeline(
        kafka_cluster, cluster_settings, tmp_path, reconstructors=3, scorers=2
    ) as run:
        await run.submit(TASKS, SAMPLES)
        await run.until_ended(8)
        run.kill("reconstruct-2")
        run.kill("score-1")
        await run.until_ended(14)
        await run.add("reconstruct")
        await run.add("score")
        outcome = await run.drain(TASKS * SAMPLES)
    _report(
        chaos_report,
        "3 reconstructors + 2 scorers on 6 partitions; one of each SIGKILLed, one of each added",
        f"{TASKS} tasks x {SAMPLES} samples ({len(outcome.sessions)} sessions)",
        outcome,
    )
