"""``rollstream bench cluster`` and ``bench instances``: replication's cost, scaling out.

Registered on the ``bench`` group by :mod:`rollstream.cli.bench`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from rollstream.cli.bench_common import output_options
from rollstream.cli.options import settings_options
from rollstream.dev.bench.cluster import ClusterBenchConfig, local_setups, run_cluster_bench
from rollstream.dev.bench.instances import InstancesBenchConfig, run_instances_bench
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.dev.broker import BrokerInfo
from rollstream.settings import KafkaSettings, StatePaths


@click.command(name="cluster")
@output_options
@click.option(
    "--records",
    type=click.IntRange(1),
    default=ClusterBenchConfig.records,
    show_default=True,
    help="Throughput: CallRecords per setup and round.",
)
@click.option(
    "--rate",
    type=click.FloatRange(0, min_open=True),
    default=ClusterBenchConfig.rate,
    show_default=True,
    help="Latency: CallRecords published per second.",
)
@click.option(
    "--latency-records",
    type=click.IntRange(2),
    default=ClusterBenchConfig.latency_records,
    show_default=True,
    help="Latency: CallRecords per setup and round (at --rate).",
)
@click.option(
    "--rounds", type=click.IntRange(1), default=ClusterBenchConfig.rounds, show_default=True
)
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=ClusterBenchConfig.partitions,
    show_default=True,
)
def cluster(
    json_path: Path,
    markdown: Path,
    records: int,
    rate: float,
    latency_records: int,
    rounds: int,
    partitions: int,
) -> None:
    """One capture publisher into a 3-node cluster (3 replicas, min ISR 2) vs one broker.

    Throughput (records/s, MB/s) and publish → acknowledged latency at a fixed rate, the two
    setups alternating over rounds. Starts both itself (one broker and three KRaft nodes, data
    in a temporary directory) and stops them after; needs no running broker.
    """
    config = ClusterBenchConfig(
        records=records,
        rate=rate,
        latency_records=latency_records,
        rounds=rounds,
        partitions=partitions,
    )
    prefix = f"bench-{int(time.time())}"
    click.echo(f"cluster: starting one broker and {config.nodes} nodes")
    with tempfile.TemporaryDirectory() as tmp, local_setups(config, Path(tmp), prefix) as setups:
        click.echo(", ".join(f"{s.name} at {s.kafka.bootstrap_servers}" for s in setups))
        result = asyncio.run(run_cluster_bench(config, setups, click.echo))
    data = record(json_path, "cluster", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


def _local_broker_pids(kafka: KafkaSettings) -> tuple[int, ...]:
    """The processes of the broker or cluster `rollstream kafka start` runs at these servers.

    Empty for any other broker (its CPU is then not measured).
    """
    try:
        state = json.loads(StatePaths().broker_state_file.read_text())
    except (OSError, ValueError):
        return ()
    if not isinstance(state, dict) or state.get("bootstrap_servers") != kafka.bootstrap_servers:
        return ()
    nodes = state.get("nodes") or [state]  # a cluster's state lists its nodes
    try:
        infos = [BrokerInfo(**node) for node in nodes]
    except TypeError:
        return ()
    # A record outlives its process, and pids are reused: not whatever runs under one now.
    return tuple(info.pid for info in infos if info.runs())


@click.command(name="instances")
@output_options
@click.option(
    "--instances",
    default=",".join(map(str, InstancesBenchConfig.instances)),
    show_default=True,
    help="Instance counts, comma-separated.",
)
@click.option(
    "--sessions",
    type=click.IntRange(1),
    default=InstancesBenchConfig.sessions,
    show_default=True,
    help="Reconstructor input: sessions of --calls calls.",
)
@click.option(
    "--calls",
    type=click.IntRange(1),
    default=InstancesBenchConfig.calls,
    show_default=True,
    help="Calls per session (prompts grow 8k tokens + 490 a call).",
)
@click.option(
    "--scorer-copies",
    type=click.IntRange(1),
    default=InstancesBenchConfig.scorer_copies,
    show_default=True,
    help="Scorer input: each trajectory this many times.",
)
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=InstancesBenchConfig.partitions,
    show_default=True,
)
@settings_options(KafkaSettings, "kafka")
def instances(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    instances: str,
    sessions: int,
    calls: int,
    scorer_copies: int,
    partitions: int,
) -> None:
    """Reconstructor calls/s and scorer trajectories/s with 1, 2, 3 instances (one group each).

    Every count gets the same input, released to all its instances at once. Needs a broker
    (`rollstream kafka start`); its topics, under the prefix `bench-<time>-n<count>`, are
    deleted after each count.
    """
    try:
        counts = tuple(int(n) for n in instances.split(",") if n.strip())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--instances") from exc
    if not counts or min(counts) < 1:
        raise click.BadParameter("counts of 1 or more", param_hint="--instances")
    config = InstancesBenchConfig(
        instances=counts,
        sessions=sessions,
        calls=calls,
        scorer_copies=scorer_copies,
        partitions=partitions,
    )
    bench_kafka = kafka.model_copy(update={"topic_prefix": f"bench-{int(time.time())}"})
    click.echo(f"instances: reconstructor and scorer with {', '.join(map(str, counts))} instances")
    pids = _local_broker_pids(kafka)
    result: dict[str, Any] = asyncio.run(run_instances_bench(config, bench_kafka, click.echo, pids))
    data = record(json_path, "instances", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")
