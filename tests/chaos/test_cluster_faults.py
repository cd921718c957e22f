"""Cluster faults under load: 50 sessions through the whole pipeline on three Kafka nodes.

Each fault acts on real broker processes while sessions run: SIGKILL of the broker leading the
events partitions, SIGKILL of the active KRaft controller, a rolling restart of all three
brokers (controlled shutdowns, one at a time, each back in sync before the next), and one broker
down for 60 s. Afterwards: every call the backend served is recorded, every session has exactly
one trajectory and one score, no harness saw an error.

``make test`` runs the leader kill; the three longer faults are marked ``long`` and run in
``make chaos``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from rollstream.dev.broker import LocalCluster
from rollstream.settings import KafkaSettings
from tests.chaos.cluster_run import ClusterRun, cluster_pipeline, wait_in_sync
from tests.fault_table import ChaosReport
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

TASKS = 25
SAMPLES = 2
DOWN_S = 60.0

Fault = Callable[[ClusterRun], Awaitable[str]]


async def _restart(run: ClusterRun, node: int) -> None:
    await run.cluster.restart_node(node)


async def kill_events_leader(run: ClusterRun) -> str:
    node = await run.events_leader()
    run.cluster.kill(node, signal.SIGKILL)
    await asyncio.sleep(10)
    await _restart(run, node)
    return f"node {node} (leader of the most events partitions) SIGKILLed, back after 10 s"


async def kill_active_controller(run: ClusterRun) -> str:
    node = run.cluster.active_controller()
    assert node is not None
    run.cluster.kill(node, signal.SIGKILL)
    began = time.monotonic()
    await until(lambda: run.cluster.active_controller() not in {None, node}, 60, "a new leader")
    elected = time.monotonic() - began
    await asyncio.sleep(10)
    await _restart(run, node)
    return f"controller node {node} SIGKILLed; another elected in {elected:.1f} s"


async def rolling_restart(run: ClusterRun) -> str:
    for node in (1, 2, 3):
        await asyncio.to_thread(run.cluster.stop_node, node)
        await _restart(run, node)
        await wait_in_sync(run.kafka)
    return "nodes 1, 2, 3 stopped (SIGTERM) and started in turn, in sync before the next"


async def one_broker_down(run: ClusterRun) -> str:
    node = await run.events_leader()
    run.cluster.kill(node, signal.SIGKILL)
    await asyncio.sleep(DOWN_S)
    await _restart(run, node)
    return f"node {node} SIGKILLed and down for {DOWN_S:.0f} s"


FAULTS: dict[str, tuple[str, Fault]] = {
    "leader": ("events partition leader SIGKILL", kill_events_leader),
    "controller": ("active controller SIGKILL", kill_active_controller),
    "rolling": ("rolling restart of 3 brokers", rolling_restart),
    "down": ("one broker down 60 s", one_broker_down),
}


@pytest.mark.parametrize(
    "fault",
    [
        "leader",
        pytest.param("controller", marks=pytest.mark.long),
        pytest.param("rolling", marks=pytest.mark.long),
        pytest.param("down", marks=pytest.mark.long),
    ],
)
@pytest.mark.timeout(900)
async def test_cluster_fault_loses_and_duplicates_nothing(
    fault: str,
    kafka_cluster: LocalCluster,
    cluster_settings: KafkaSettings,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    name, act = FAULTS[fault]
    done: list[str] = []

    async with cluster_pipeline(kafka_cluster, cluster_settings, tmp_path) as run:

        async def inject() -> None:
            done.append(await act(run))

        try:
            outcome = await run.run_tasks(TASKS, SAMPLES, inject, after_ended=6)
        finally:
            for node in (1, 2, 3):  # the next test needs the whole cluster
                if kafka_cluster.pid(node) is None:
                    await _restart(run, node)
        await wait_in_sync(cluster_settings)
    lost = outcome.lost_calls + outcome.lost_trajectories + outcome.lost_scores
    duplicated = outcome.duplicated_trajectories + outcome.duplicated_scores
    errors = len(outcome.failed_sessions) + outcome.failed_calls
    chaos_report(
        fault=f"{name}: {done[0]}",
        load=f"{TASKS} tasks x {SAMPLES} samples ({len(outcome.sessions)} sessions, "
        f"{outcome.calls_recorded} calls) on 3 brokers, replicas 3, min.insync 2",
        lost=lost,
        duplicated=duplicated,
        errors=str(errors),
    )
    assert len(outcome.sessions) == TASKS * SAMPLES and not outcome.cancelled_sessions
    assert outcome.calls_ok == outcome.calls_served, outcome
    assert lost == 0 and duplicated == 0, outcome
    assert errors == 0, outcome
    assert not outcome.not_complete, outcome
