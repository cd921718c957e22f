"""``rollstream bench cluster``: one capture publisher into a replicated cluster vs one broker.

Both setups run side by side in one run, on this machine: a single broker (topics of one
replica, ``min.insync.replicas`` 1) and a cluster of three KRaft nodes (three replicas,
``min.insync.replicas`` 2), each started by the bench in a temporary directory and stopped
after it. Every round measures each setup in turn, alternating their order (ABBA):

- **Throughput**: the publisher bench's throughput run (:func:`one_throughput_run`): one
  :class:`CapturePublisher` with its default settings sending pre-encoded CallRecords as fast
  as it takes them into a fresh events-like topic, timed to the last acknowledgement
  (``acks=all``, idempotent producer). The brokers' CPU seconds over the same span too.
- **Latency**: the same publisher fed at a fixed moderate rate; per record, the time from
  ``publish()`` to its acknowledgement.

Figures are medians over the rounds; the ratios are cluster / single broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rollstream.dev.bench.common import percentile
from rollstream.dev.bench.load import Encoding
from rollstream.dev.bench.publisher import (
    PublisherBenchConfig,
    create_topic,
    delete_topic,
    events_like,
    one_throughput_run,
    rate_figures,
    throughput_load,
    wait_published,
)
from rollstream.dev.bench.runner import median_of, run_rounds
from rollstream.dev.broker.cluster import LocalCluster
from rollstream.dev.broker.config import replication_for
from rollstream.dev.broker.process import LocalBroker
from rollstream.dev.broker.settings import BrokerSettings
from rollstream.kafka.admin import TopicAdmin
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings, Record
from rollstream.settings import KafkaSettings, StatePaths

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ClusterBenchConfig:
    """The sizes of one run."""

    # Throughput: CallRecords of the publisher bench's shape (8,000-token prompts on average),
    # `encoding` as the interceptor sends them.
    records: int = 10_000
    sessions: int = 64
    turns: int = 11
    system_tokens: int = 7000
    tool_result_tokens: int = 150
    completion_tokens: int = 50
    encoding: str = Encoding.DELTA.value
    # Latency: `latency_records` of the same records at `rate` a second. The publisher lingers
    # `latency_linger_ms` for a batch: its default (250 ms) would add up to a quarter second
    # to every record in both setups alike and hide the replication's share.
    rate: float = 1000.0
    latency_records: int = 10_000
    latency_linger_ms: float = 0.0
    rounds: int = 3
    partitions: int = 6
    nodes: int = 3
    # Each node's JVM heap: four JVMs share the machine.
    heap: str = "512m"
    start_timeout_s: float = 180.0
    timeout_s: float = 300.0

    def publisher_config(self) -> PublisherBenchConfig:
        """The publisher bench's configuration for the same load (its helpers take one)."""
        return PublisherBenchConfig(
            encodings=(self.encoding,),
            records=max(self.records, self.latency_records),
            sessions=self.sessions,
            turns=self.turns,
            system_tokens=self.system_tokens,
            tool_result_tokens=self.tool_result_tokens,
            completion_tokens=self.completion_tokens,
            partitions=self.partitions,
            timeout_s=self.timeout_s,
        )


@dataclass(frozen=True)
class KafkaSetup:
    """One side of the comparison: where it is, how its topics replicate, its broker processes."""

    name: str
    kafka: KafkaSettings
    nodes: int
    replication_factor: int
    min_insync_replicas: int
    # The brokers' process ids on this machine, for their CPU time (none: not measured).
    pids: tuple[int, ...] = ()


@contextlib.contextmanager
def local_setups(config: ClusterBenchConfig, root: Path, prefix: str) -> Iterator[list[KafkaSetup]]:
    """A single broker and a cluster of ``config.nodes``, their data under ``root``.

    Both run for the whole bench (restarting them every round would cost more than the
    rounds), and stop when the block ends, whatever happens in it.
    """

    def settings(name: str) -> BrokerSettings:
        return BrokerSettings(
            port=0, data_dir=root / name, heap=config.heap, start_timeout=config.start_timeout_s
        )

    paths = StatePaths()
    single = LocalBroker(settings("single"), paths, record_state=False, outlive_parent=False)
    cluster = LocalCluster(
        settings("cluster"), paths, config.nodes, record_state=False, outlive_parent=False
    )
    try:
        one = single.start()
        many = cluster.start()
        replicas, min_insync = replication_for(config.nodes)

        def kafka(servers: str) -> KafkaSettings:
            return KafkaSettings(
                bootstrap_servers=servers, topic_prefix=prefix, security_protocol="PLAINTEXT"
            )

        yield [
            KafkaSetup("single", kafka(one.bootstrap_servers), 1, 1, 1, (one.pid,)),
            KafkaSetup(
                "cluster",
                kafka(many.bootstrap_servers),
                config.nodes,
                replicas,
                min_insync,
                tuple(node.pid for node in many.nodes),
            ),
        ]
    finally:
        cluster.stop()
        single.stop()


class _AckTimes(CapturePublisher):
    """A CapturePublisher noting when its records are acknowledged.

    It sends in order, one batch at a time, so the k-th record acknowledged is the k-th
    published, as long as none is spooled or set aside (the run reports both).
    """

    def __init__(
        self, kafka: KafkaSettings, settings: PublisherSettings, topic: str, spool: Path
    ) -> None:
        super().__init__(kafka, settings, topic, spool)
        self.acked_at: list[float] = []

    async def _send(self, batch: list[Record]) -> tuple[int, int]:
        # Every batch's acknowledgements come back here, straight from the delivery.
        settled, sent = await super()._send(batch)
        self.acked_at += [time.perf_counter()] * sent
        return settled, sent


async def one_latency_run(
    config: ClusterBenchConfig,
    kafka: KafkaSettings,
    topic: str,
    load: list[tuple[bytes, bytes]],
    spool: Path,
) -> dict[str, Any]:
    """``load`` published at ``config.rate``; publish → acknowledged percentiles in ms."""
    publisher = _AckTimes(
        kafka, PublisherSettings(linger_ms=config.latency_linger_ms), topic, spool
    )
    sent_at: list[float] = []
    await publisher.start()
    try:
        publisher.publish(b"warmup", b"warmup")  # the producer connects: not measured
        await wait_published(publisher, 1, config.timeout_s)
        began = time.perf_counter()
        for i, (key, value) in enumerate(load):
            delay = began + i / config.rate - time.perf_counter()
            # Behind schedule, still yield: the sending task must run between records.
            await asyncio.sleep(max(0.0, delay))
            sent_at.append(time.perf_counter())
            publisher.publish(key, value)
        await wait_published(publisher, len(load) + 1, config.timeout_s)
        metrics = publisher.metrics
    finally:
        await publisher.stop()
    latencies = [
        (acked - sent) * 1000 for sent, acked in zip(sent_at, publisher.acked_at[1:], strict=True)
    ]
    span = sent_at[-1] - sent_at[0]
    return {
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies), 2),
        "rate_achieved": round((len(load) - 1) / span, 1) if span > 0 else None,
        "records_per_batch": round(len(load) / max(1, metrics.batches - 1), 2),
        "spooled": metrics.spooled,
        "send_failures": metrics.send_failures,
    }


async def _replication(kafka: KafkaSettings, topic: str) -> tuple[int, str | None]:
    """The fewest replicas any partition of ``topic`` has, and its ``min.insync.replicas``."""
    async with TopicAdmin(kafka) as admin:
        (description,) = await admin.describe([topic])
    fewest = min((len(r) for r in description.replicas.values()), default=0)
    return fewest, description.configs.get("min.insync.replicas")


async def _one_round(
    config: ClusterBenchConfig,
    setup: KafkaSetup,
    topic: str,
    load: list[tuple[bytes, bytes]],
    spool: Path,
) -> dict[str, Any]:
    spec = replace(
        events_like(setup.kafka.topic_prefix, topic, config.partitions),
        replication_factor=setup.replication_factor,
        min_insync_replicas=setup.min_insync_replicas,
    )
    await create_topic(setup.kafka, spec)
    try:
        replicas, min_insync = await _replication(setup.kafka, topic)
        run = await one_throughput_run(
            config.publisher_config(),
            setup.kafka,
            topic,
            load[: config.records],
            spool / "throughput",
            setup.pids,
        )
        run["latency"] = await one_latency_run(
            config, setup.kafka, topic, load[: config.latency_records], spool / "latency"
        )
    finally:
        await delete_topic(setup.kafka, topic)
    return run | {"replicas": replicas, "min_insync": min_insync}


async def run_cluster_bench(
    config: ClusterBenchConfig, setups: list[KafkaSetup], progress: Progress = print
) -> dict[str, Any]:
    """Every setup measured each round, their order alternating; medians and ratios."""
    load = throughput_load(config.publisher_config(), Encoding(config.encoding))
    by_name = {s.name: s for s in setups}
    with tempfile.TemporaryDirectory() as tmp:

        async def measure(name: str, r: int) -> dict[str, Any]:
            setup = by_name[name]
            topic = f"{setup.kafka.topic_prefix}.cluster-{name}-{r}"
            return await _one_round(config, setup, topic, load, Path(tmp) / f"{name}-{r}")

        def describe(run: dict[str, Any]) -> str:
            lat = run["latency"]
            return (
                f"{run['records_per_s']:,.0f} records/s, {run['mb_per_s']:.1f} MB/s; at "
                f"{config.rate:g}/s publish → ack p50 / p95 / p99 {lat['p50_ms']} / "
                f"{lat['p95_ms']} / {lat['p99_ms']} ms"
            )

        runs = await run_rounds(list(by_name), config.rounds, measure, progress, describe)
    described = [
        {
            "name": s.name,
            "nodes": s.nodes,
            "replication_factor": s.replication_factor,
            "min_insync_replicas": s.min_insync_replicas,
            "broker_processes": len(s.pids),
        }
        for s in setups
    ]
    shape = config.publisher_config().shape()
    growth = shape.completion_tokens + shape.tool_result_tokens
    settings = PublisherSettings().model_dump(include={"batch_records", "linger_ms"})
    return {
        "config": asdict(config),
        "publisher_settings": settings,
        "prompt_tokens_mean": shape.system_tokens + (shape.turns - 1) * growth / 2,
        **summarize(described, runs, config.records),
    }


Result = dict[str, Any]

#: The latency figures compared between the setups.
LATENCIES = ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")


def summarize_setup(meta: Result, runs: list[Result], records: int) -> Result:
    """One setup's rounds: medians (ranges where they tell something), totals of losses."""
    latency = [run["latency"] for run in runs]
    cpu = (
        [
            {"cores": r["broker_cpu_s"] / r["elapsed_s"], "us": r["broker_cpu_s"] / records * 1e6}
            for r in runs
        ]
        if meta.get("broker_processes", 0) > 0
        else []
    )
    p99 = [lat["p99_ms"] for lat in latency]
    achieved = [lat for lat in latency if lat["rate_achieved"]]
    return meta | {
        "replicas_created": min(run["replicas"] for run in runs),
        "min_insync_created": runs[0]["min_insync"],
        **rate_figures(runs),
        "client_cpu_us_per_record": median_of(runs, "cpu_us_per_record", 1),
        "broker_cpu_cores": median_of(cpu, "cores", 2) if cpu else None,
        "broker_cpu_us_per_record": round(statistics.median(c["us"] for c in cpu)) if cpu else None,
        "latency_p50_ms": median_of(latency, "p50_ms"),
        "latency_p95_ms": median_of(latency, "p95_ms"),
        "latency_p99_ms": median_of(latency, "p99_ms"),
        "latency_p99_range": [min(p99), max(p99)],
        "latency_max_ms": max(lat["max_ms"] for lat in latency),
        "latency_rate_achieved": median_of(achieved, "rate_achieved", 1) if achieved else None,
        "records_per_batch": median_of(latency, "records_per_batch"),
        "lost": sum(records - run["stored"] for run in runs),
        "spooled": sum(run["spooled"] + run["latency"]["spooled"] for run in runs),
        "send_failures": sum(
            run["send_failures"] + run["latency"]["send_failures"] for run in runs
        ),
    }


def ratios(
    base: Result, other: Result, base_runs: list[Result], other_runs: list[Result]
) -> Result:
    """``other`` / ``base`` for throughput and latency; per-round throughput ratios' range.

    Both setups are measured in every round, so a round's ratio compares runs minutes apart
    at most: its range says how much the machine's load moved the comparison.
    """
    per_round = [
        o["records_per_s"] / b["records_per_s"] for b, o in zip(base_runs, other_runs, strict=True)
    ]
    out: Result = {
        "of": other["name"],
        "to": base["name"],
        "records_per_s": round(other["records_per_s"] / base["records_per_s"], 2),
        "records_per_s_range": [round(min(per_round), 2), round(max(per_round), 2)],
        "mb_per_s": round(other["mb_per_s"] / base["mb_per_s"], 2) if base["mb_per_s"] else None,
    }
    for key in LATENCIES:
        out[key] = round(other[key] / base[key], 2) if base[key] else None
    return out


def summarize(setups: list[Result], runs: dict[str, list[Result]], records: int) -> Result:
    """Every setup summarised, and the last one against the first (cluster / single broker)."""
    summaries = [summarize_setup(meta, runs[meta["name"]], records) for meta in setups]
    result: Result = {"records": records, "setups": summaries}
    if len(summaries) > 1:
        base, other = summaries[0], summaries[-1]
        result["ratio"] = ratios(base, other, runs[base["name"]], runs[other["name"]])
    return result
