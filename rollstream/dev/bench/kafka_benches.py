"""The specs of the benchmarks of the log and its consumers: publisher, cluster, services."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rollstream.dev.bench.cluster import ClusterBenchConfig, local_setups, run_cluster_bench
from rollstream.dev.bench.console import ConsoleBenchConfig, run_console_bench
from rollstream.dev.bench.instances import InstancesBenchConfig, run_instances_bench
from rollstream.dev.bench.outage import OutageBenchConfig, run_outage_bench
from rollstream.dev.bench.pipeline import PipelineBenchConfig, run_pipeline_bench
from rollstream.dev.bench.publisher import PublisherBenchConfig, run_publisher_bench
from rollstream.dev.bench.reconstruct import ReconstructBenchConfig, run_reconstruct_bench
from rollstream.dev.bench.spec import Bench, Env, Option, partitions_option, rounds_option
from rollstream.dev.bench.state import StateBenchConfig, run_state_bench
from rollstream.dev.broker.records import local_broker_pids
from rollstream.settings import StatePaths


async def _reconstruct(config: ReconstructBenchConfig, env: Env) -> dict[str, Any]:
    return await run_reconstruct_bench(config, env.kafka if config.e2e else None, env.say)


async def _cluster(config: ClusterBenchConfig, env: Env) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_setups(config, Path(tmp), env.kafka.topic_prefix) as setups,
    ):
        env.say(", ".join(f"{s.name} at {s.kafka.bootstrap_servers}" for s in setups))
        return await run_cluster_bench(config, setups, env.say)


async def _instances(config: InstancesBenchConfig, env: Env) -> dict[str, Any]:
    pids = local_broker_pids(StatePaths().broker_state_file, env.given.bootstrap_servers)
    return await run_instances_bench(config, env.kafka, env.say, pids)


KAFKA: tuple[Bench, ...] = (
    Bench(
        "reconstruct",
        ReconstructBenchConfig,
        _reconstruct,
        "Reconstruction calls/s, SessionEnded → trajectory latency, long sessions' cost per "
        "call.\n\n"
        "The long-session part times sessions of 100 to 10,000 calls in-process. The end-to-end "
        "part needs a broker (`rollstream kafka start`) and runs the reconstructor service on "
        "topics under the prefix `bench-<time>`, deleted afterwards.",
        lambda _: "reconstruct: throughput per process, then end to end through Kafka",
        (
            Option("sessions", "Throughput: sessions per round."),
            Option("calls", "Throughput: calls per session (prompts grow 8k tokens + 490 a call)."),
            rounds_option(),
            Option("rate", "End to end: sessions produced per second."),
            Option("duration_s", "End to end: seconds of production.", "duration"),
            Option("e2e_calls", "End to end: calls per session."),
            partitions_option(),
            Option("e2e", "Also measure through Kafka."),
            Option(
                "long_calls",
                "Long sessions: calls per session, comma-separated (contexts grow to 100k "
                "tokens); empty to skip.",
            ),
        ),
        broker=lambda config: bool(config.e2e),  # only the end-to-end part reads Kafka
    ),
    Bench(
        "publisher",
        PublisherBenchConfig,
        lambda config, env: run_publisher_bench(config, env.kafka, env.say),
        "CallRecords/s from one capture publisher, and the broker bytes of a 50-call session.\n\n"
        "Delta-encoded prompts against the naive full-prompt encoding (and against records that "
        "also carry the harness's request), side by side. Needs a broker (`rollstream kafka "
        "start`); its topics, under the prefix `bench-<time>`, are deleted after each "
        "measurement.",
        lambda _: "publisher: CallRecords/s and session bytes on the broker, per encoding",
        (
            Option("records", "Throughput: CallRecords per encoding and round.", low=1),
            rounds_option(),
            partitions_option(),
        ),
        broker=True,
    ),
    Bench(
        "outage",
        OutageBenchConfig,
        lambda config, env: run_outage_bench(config, env.say),
        "How late the event loop wakes while the publisher spools and drains, per disk mode.\n\n"
        "The spool's disk work on the loop (the old way) against on the publisher's disk thread, "
        "side by side; starts brokers of its own (no running broker needed).",
        lambda _: "outage: the publisher's disk work on the event loop, against on its own thread",
        (
            Option("outage_s", "How long the broker is away.", low=0, open_low=True),
            Option("rate", "Records a second, throughout.", low=0, open_low=True),
        ),
    ),
    Bench(
        "state",
        StateBenchConfig,
        lambda config, env: run_state_bench(config, env.kafka, env.say),
        "The reconstructor's state topic at a cluster's load: bytes/s and a new owner's read.\n\n"
        "The emitted map rewritten whole in every transaction (before) against written as it "
        "changes (now), side by side. Needs a broker (`rollstream kafka start`); its topics, "
        "under the prefix `bench-<time>`, are deleted afterwards.",
        lambda _: "state: the state topic's writes and reads, per layout",
        (Option("seconds", "How long a partition's load is simulated.", low=0, open_low=True),),
        broker=True,
    ),
    Bench(
        "cluster",
        ClusterBenchConfig,
        _cluster,
        "One capture publisher into a 3-node cluster (3 replicas, min ISR 2) vs one broker.\n\n"
        "Throughput (records/s, MB/s) and publish → acknowledged latency at a fixed rate, the "
        "two setups alternating over rounds. Starts both itself (one broker and three KRaft "
        "nodes, data in a temporary directory) and stops them after; needs no running broker.",
        lambda c: f"cluster: starting one broker and {c.nodes} nodes",
        (
            Option("records", "Throughput: CallRecords per setup and round.", low=1),
            Option("rate", "Latency: CallRecords published per second.", low=0, open_low=True),
            Option(
                "latency_records", "Latency: CallRecords per setup and round (at --rate).", low=2
            ),
            rounds_option(),
            partitions_option(),
        ),
    ),
    Bench(
        "pipeline",
        PipelineBenchConfig,
        lambda config, env: run_pipeline_bench(config, env.kafka, env.say),
        "Reconstructor calls/s and scorer trajectories/s through Kafka, SessionEnded → Scored.\n\n"
        "Runs `rollstream reconstruct` and `rollstream score` as subprocesses. Needs a broker "
        "(`rollstream kafka start`); its topics, under the prefix `bench-<time>`, are deleted "
        "afterwards.",
        lambda _: "pipeline: reconstructor and scorer through Kafka, then end to end",
        (
            Option("sessions", "Throughput: sessions prefilled into the events topic.", low=1),
            Option(
                "calls",
                "Throughput: calls per session (prompts grow 8k tokens + 490 a call).",
                low=1,
            ),
            Option("rate", "End to end: sessions arriving per second.", low=0, open_low=True),
            Option("duration_s", "End to end: seconds of arrivals.", "duration", 0, open_low=True),
            partitions_option(),
        ),
        broker=True,
    ),
    Bench(
        "instances",
        InstancesBenchConfig,
        _instances,
        "Reconstructor calls/s and scorer trajectories/s with 1, 2, 3 instances (one group "
        "each).\n\n"
        "Every count gets the same input, released to all its instances at once. Needs a broker "
        "(`rollstream kafka start`); its topics, under the prefix `bench-<time>-n<count>`, are "
        "deleted after each count.",
        lambda c: (
            f"instances: reconstructor and scorer with {', '.join(map(str, c.instances))} instances"
        ),
        (
            Option("instances", "Instance counts, comma-separated.", low=1),
            Option("sessions", "Reconstructor input: sessions of --calls calls.", low=1),
            Option("calls", "Calls per session (prompts grow 8k tokens + 490 a call).", low=1),
            Option("scorer_copies", "Scorer input: each trajectory this many times.", low=1),
            partitions_option(),
        ),
        broker=True,
    ),
    Bench(
        "console",
        ConsoleBenchConfig,
        lambda config, env: run_console_bench(config, env.say),
        "The console at scale: records/s into its aggregates, memory held, what a browser "
        "loads.\n\n"
        "A million records by default (20,000 sessions of 50 calls, each scored) through the "
        "console's fleet, rewards and index in one process; then each API answer's server time "
        "and size against the whole session list, side by side. No broker needed.",
        lambda c: f"console: {c.sessions:,} sessions of {c.calls} calls through its aggregates",
        (
            Option("sessions", "Sessions, each with its calls and a scored trajectory.", low=1),
            Option("calls", "Calls per session.", low=1),
            Option("group_size", "Sessions per GRPO group.", low=1),
            Option("repeats", "Times each answer is timed (the median is kept).", low=1),
        ),
    ),
)
