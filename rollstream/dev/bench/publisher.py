"""``rollstream bench publisher``: CallRecords/s from one capture publisher, and session bytes.

Both for every :class:`Encoding`, on topics configured like the events topic:

- **Throughput**: one :class:`CapturePublisher` (default settings) sending pre-encoded
  CallRecords of many concurrent sessions (turns interleaved) as fast as it takes them while
  its queue stays below half its bound (nothing spools), timed from the first ``publish()`` to
  the last acknowledgement; rounds alternate the encodings, figures are medians.
- **Session bytes**: one 50-call session of a 32k-token final context, every record its own
  batch (a real session's calls are seconds apart), then the topic's bytes on the broker
  (DescribeLogDirs: compressed, as stored).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollstream.dev.bench.common import process_cpu_seconds
from rollstream.dev.bench.load import Encoding, encoded, renamed
from rollstream.dev.bench.logdirs import topic_log_bytes
from rollstream.dev.bench.runner import median_of, run_rounds
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.schemas import AvroSerializer, CallRecord, TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PublisherBenchConfig:
    """The sizes of one run."""

    encodings: tuple[str, ...] = tuple(e.value for e in Encoding)
    # Throughput: CallRecords of `sessions` distinct sessions (copied under new ids up to
    # `records`), prompts from system_tokens growing by completion + tool result tokens a turn
    # (7,000 -> 9,000 tokens, 8,000 on average, with the defaults).
    records: int = 10_000
    sessions: int = 64
    turns: int = 11
    system_tokens: int = 7000
    tool_result_tokens: int = 150
    completion_tokens: int = 50
    rounds: int = 3
    partitions: int = 3
    # Session bytes: 8,000 -> 32,010 prompt tokens, a final context of 32,050 tokens.
    session_turns: int = 50
    session_system_tokens: int = 8000
    session_tool_result_tokens: int = 450
    session_completion_tokens: int = 40
    timeout_s: float = 300.0

    def shape(self) -> SyntheticShape:
        """The throughput sessions' shape."""
        return SyntheticShape(
            turns=self.turns,
            system_tokens=self.system_tokens,
            tool_result_tokens=self.tool_result_tokens,
            completion_tokens=self.completion_tokens,
        )

    def session_shape(self) -> SyntheticShape:
        """The shape of the session whose bytes are measured."""
        return SyntheticShape(
            turns=self.session_turns,
            system_tokens=self.session_system_tokens,
            tool_result_tokens=self.session_tool_result_tokens,
            completion_tokens=self.session_completion_tokens,
        )


def events_like(prefix: str, name: str, partitions: int) -> TopicSpec:
    """A topic named ``name`` configured like the events topic (zstd, large messages)."""
    names = TopicNames(prefix)
    events = next(s for s in topic_specs(names, partitions) if s.name == names.events)
    return TopicSpec(name, partitions, dict(events.configs))


def throughput_load(config: PublisherBenchConfig, encoding: Encoding) -> list[tuple[bytes, bytes]]:
    """(key, value) of ``config.records`` CallRecords, concurrent sessions' turns interleaved."""
    serializer = AvroSerializer()
    pool = [synthetic_session(f"pool-{i}", config.shape(), seed=i) for i in range(config.sessions)]
    calls = [[r for r in encoded(s, encoding) if isinstance(r, CallRecord)] for s in pool]
    out: list[tuple[bytes, bytes]] = []
    copy = 0
    while len(out) < config.records:
        # One wave: every pool session under a new id, turn by turn across the wave.
        wave = [
            renamed(list(records), f"pool-{i}", f"s{copy}-{i}") for i, records in enumerate(calls)
        ]
        for turn in range(config.turns):
            for records in wave:
                record = records[turn]
                assert isinstance(record, CallRecord)
                out.append((record.session_id.encode(), serializer.encode(record)))
        copy += 1
    return out[: config.records]


async def wait_published(publisher: CapturePublisher, count: int, timeout: float) -> None:
    """Until ``count`` records are acknowledged; TimeoutError (with the last error) after."""
    deadline = time.monotonic() + timeout
    while publisher.metrics.published < count:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{publisher.metrics.published} of {count} records acknowledged after "
                f"{timeout} s (last error: {publisher.metrics.last_error or 'none'})"
            )
        await asyncio.sleep(0.001)


async def create_topic(kafka: KafkaSettings, spec: TopicSpec) -> None:
    """Create one measured topic (its replication as the spec says, else the cluster's)."""
    async with TopicAdmin(kafka) as admin:
        await admin.create([spec])


async def delete_topic(kafka: KafkaSettings, topic: str) -> None:
    """Drop a measured topic: the runs write hundreds of MB the broker need not keep."""
    async with TopicAdmin(kafka) as admin:
        await admin.delete([topic])


async def _count_records(kafka: KafkaSettings, topic: str) -> int:
    """Records in ``topic`` (the sum of its partitions' end offsets)."""
    consumer = make_consumer(kafka)
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic) or []
        ends = await consumer.end_offsets(tps)
        return int(sum(ends.values()))
    finally:
        await consumer.stop()


async def one_throughput_run(
    config: PublisherBenchConfig,
    kafka: KafkaSettings,
    topic: str,
    load: list[tuple[bytes, bytes]],
    spool: Path,
    broker_pids: tuple[int, ...] = (),
) -> dict[str, Any]:
    """One timed run of ``load`` through a fresh publisher into ``topic``.

    With ``broker_pids`` (brokers of this machine), their CPU seconds over the timed span too.
    """
    settings = PublisherSettings()
    window = max(1, settings.max_queue_records // 2)
    publisher = CapturePublisher(kafka, settings, topic, spool)
    await publisher.start()
    try:
        # The producer connects on the first batch: not part of the timing.
        publisher.publish(b"warmup", b"warmup")
        await wait_published(publisher, 1, config.timeout_s)
        cpu_before = time.process_time()
        brokers_before = sum(process_cpu_seconds(pid) for pid in broker_pids)
        began = time.perf_counter()
        for i, (key, value) in enumerate(load):
            if i + 1 - publisher.metrics.published > window:
                await wait_published(publisher, i + 1 - window, config.timeout_s)
            publisher.publish(key, value)
        await wait_published(publisher, len(load) + 1, config.timeout_s)
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu_before
        broker_cpu = sum(process_cpu_seconds(pid) for pid in broker_pids) - brokers_before
        metrics = publisher.metrics
    finally:
        await publisher.stop()
    stored = await _count_records(kafka, topic) - 1
    log_bytes = await topic_log_bytes(kafka, topic, config.partitions)
    value_bytes = sum(len(v) for _, v in load)
    return {
        "records_per_s": len(load) / elapsed,
        "mb_per_s": value_bytes / elapsed / 1e6,
        "cpu_us_per_record": cpu / len(load) * 1e6,
        "elapsed_s": elapsed,
        "broker_cpu_s": broker_cpu,
        "value_bytes_per_record": value_bytes / len(load),
        "log_bytes_per_record": log_bytes / (len(load) + 1),
        "stored": stored,
        "batches": metrics.batches,
        "spooled": metrics.spooled,
        "dropped": metrics.dropped,
        "send_failures": metrics.send_failures,
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput, the upper one of an even count (its MB/s goes with it)."""
    return sorted(runs, key=lambda run: run["records_per_s"])[len(runs) // 2]


def rate_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run's records/s and MB/s, and the range of records/s over the runs."""
    rates = [run["records_per_s"] for run in runs]
    median = median_run(runs)
    return {
        "records_per_s": round(median["records_per_s"]),
        "records_per_s_range": [round(min(rates)), round(max(rates))],
        "mb_per_s": round(median["mb_per_s"], 1),
    }


async def measure_throughput(
    config: PublisherBenchConfig, kafka: KafkaSettings, progress: Progress
) -> dict[str, Any]:
    """CallRecords/s per encoding, median over alternating rounds."""
    loads = {e: throughput_load(config, Encoding(e)) for e in config.encodings}
    with tempfile.TemporaryDirectory() as tmp:

        async def measure(encoding: str, r: int) -> dict[str, Any]:
            topic = f"{kafka.topic_prefix}.publisher-{encoding}-{r}"
            await create_topic(kafka, events_like(kafka.topic_prefix, topic, config.partitions))
            try:
                spool = Path(tmp) / f"{encoding}-{r}"
                return await one_throughput_run(config, kafka, topic, loads[encoding], spool)
            finally:
                await delete_topic(kafka, topic)

        runs = await run_rounds(
            list(loads),
            config.rounds,
            measure,
            progress,
            lambda run: (
                f"{run['records_per_s']:,.0f} records/s, {run['mb_per_s']:.1f} MB/s, "
                f"{run['log_bytes_per_record']:,.0f} bytes/record on the broker"
            ),
        )
    results = [
        {
            "encoding": e,
            **rate_figures(runs[e]),
            "cpu_us_per_record": median_of(runs[e], "cpu_us_per_record", 1),
            "value_bytes_per_record": round(median_run(runs[e])["value_bytes_per_record"]),
            "log_bytes_per_record": round(median_run(runs[e])["log_bytes_per_record"]),
            "records": config.records,
            "lost": sum(config.records - run["stored"] for run in runs[e]),
            **{k: sum(run[k] for run in runs[e]) for k in ("spooled", "dropped", "send_failures")},
        }
        for e in runs
    ]
    shape = config.shape()
    growth = shape.completion_tokens + shape.tool_result_tokens
    return {
        "records": config.records,
        "sessions": config.sessions,
        "turns": config.turns,
        "prompt_tokens_first": shape.system_tokens,
        "prompt_tokens_last": shape.system_tokens + (shape.turns - 1) * growth,
        "prompt_tokens_mean": shape.system_tokens + (shape.turns - 1) * growth / 2,
        "encodings": results,
    }


async def measure_session_bytes(
    config: PublisherBenchConfig, kafka: KafkaSettings, progress: Progress
) -> dict[str, Any]:
    """Broker bytes of one long session per encoding, each record its own batch."""
    session = synthetic_session("bytes-session", config.session_shape(), seed=7)
    last = session.calls[-1]
    final_tokens = len(session.prompts[last.call_id]) + len(last.completion_token_ids or [])
    serializer = AvroSerializer()
    results = []
    key = b"bytes-session"
    with tempfile.TemporaryDirectory() as tmp:
        for e in (Encoding(e) for e in config.encodings):
            values = [serializer.encode(r) for r in encoded(session, e)]
            topic = f"{kafka.topic_prefix}.session-{e.value}"
            await create_topic(kafka, events_like(kafka.topic_prefix, topic, 1))
            try:
                publisher = CapturePublisher(kafka, PublisherSettings(), topic, Path(tmp) / e.value)
                async with publisher:
                    for i, value in enumerate(values):
                        publisher.publish(key, value)
                        await wait_published(publisher, i + 1, config.timeout_s)
                log_bytes = await topic_log_bytes(kafka, topic, 1)
            finally:
                await delete_topic(kafka, topic)
            result = {
                "encoding": e.value,
                "records": len(values),
                "value_bytes": sum(len(v) for v in values),
                "log_bytes": log_bytes,
                "x_final_tokens_x4": round(log_bytes / (final_tokens * 4), 3),
            }
            progress(
                f"  {e.value}: {log_bytes:,} bytes on the broker "
                f"({result['x_final_tokens_x4']} x final tokens x 4; "
                f"{result['value_bytes']:,} bytes of records before compression)"
            )
            results.append(result)
    shape = config.session_shape()
    return {
        "turns": shape.turns,
        "prompt_tokens_first": shape.system_tokens,
        "prompt_tokens_last": len(session.prompts[last.call_id]),
        "final_tokens": final_tokens,
        "bound_bytes": 2 * final_tokens * 4,
        "encodings": results,
    }


async def run_publisher_bench(
    config: PublisherBenchConfig, kafka: KafkaSettings, progress: Progress = print
) -> dict[str, Any]:
    """Both measurements, on topics under ``kafka.topic_prefix`` (deleted afterwards)."""
    progress(
        f"throughput: {config.records:,} CallRecords per encoding and round, "
        f"{config.rounds} rounds, one publisher ({kafka.bootstrap_servers})"
    )
    throughput = await measure_throughput(config, kafka, progress)
    progress(f"session bytes: one {config.session_turns}-turn session per encoding")
    session = await measure_session_bytes(config, kafka, progress)
    settings = PublisherSettings().model_dump(include={"batch_records", "linger_ms"})
    return {
        "config": asdict(config),
        "publisher_settings": settings,
        "throughput": throughput,
        "session": session,
    }
