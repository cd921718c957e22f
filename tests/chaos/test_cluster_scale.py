"""Several of everything on the three-node cluster: rollout nodes and consumer instances.

One run: two rollout nodes, each with its own interceptor, share the tasks (one consumer group
on six partitions) while three reconstructors and two scorers share the six partitions of their
inputs. Under load one reconstructor and one scorer are SIGKILLed and a third node joins; a
second wave of tasks follows; once the new node runs sessions, the first node leaves (SIGTERM)
and one more reconstructor and scorer are added. Counted afterwards: every sample completed
exactly once, every session has one trajectory and one score, every call served is recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.dev.broker import LocalCluster
from rollstream.settings import KafkaSettings
from tests.chaos.cluster_run import Outcome, cluster_pipeline
from tests.fault_table import ChaosReport
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
async def test_nodes_and_consumer_instances_join_leave_and_die_every_sample_once(
    kafka_cluster: LocalCluster,
    cluster_settings: KafkaSettings,
    tmp_path: Path,
    chaos_report: ChaosReport,
) -> None:
    wave = TASKS // 2
    async with cluster_pipeline(
        kafka_cluster, cluster_settings, tmp_path, nodes=2, reconstructors=3, scorers=2, max_run=4
    ) as run:
        await run.submit(wave, SAMPLES)
        await run.until_ended(6)
        run.kill("reconstruct-2")
        run.kill("score-1")
        joined = await run.add("node")
        # The second wave after the join: the six partitions are spread over three nodes.
        await run.submit(wave, SAMPLES, first=wave)

        async def joined_runs() -> bool:
            await run.poll()
            return run.started_on(joined) > 0

        await until(joined_runs, 120, f"{joined} starts a session", interval=0.2)
        run.leave("node-1")
        await run.add("reconstruct")
        await run.add("score")
        outcome = await run.drain(TASKS * SAMPLES)
    load = f"{TASKS} tasks x {SAMPLES} samples in two waves on 6 partitions"
    _report(
        chaos_report,
        "3 reconstructors + 2 scorers; one of each SIGKILLed, one of each added",
        f"{load} ({len(outcome.sessions)} sessions)",
        outcome,
    )
    _report(
        chaos_report,
        "2 nodes with own interceptors; node-3 joins, node-1 leaves (SIGTERM) mid-run",
        f"{load}; sessions per node {dict(sorted(outcome.by_node.items()))}",
        outcome,
    )
    assert set(outcome.by_node) == {"node-1", "node-2", joined}, outcome.by_node
    # Every sample once, plus a new session for each one the leave cancelled.
    cancelled = len(outcome.cancelled_sessions)
    assert sum(outcome.by_node.values()) == TASKS * SAMPLES + cancelled
