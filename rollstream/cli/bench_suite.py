"""The ``rollstream bench`` commands publisher, outage, state, pipeline, wall, long-session, all.

Registered on the ``bench`` group by :mod:`rollstream.cli.bench`, which stays small this way.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import click

from rollstream.cli.bench_common import delete_topics, output_options
from rollstream.cli.options import settings_options
from rollstream.dev.bench.long_stack import RUNS, LongRun, run_session
from rollstream.dev.bench.outage import OutageBenchConfig, run_outage_bench
from rollstream.dev.bench.pipeline import PipelineBenchConfig, run_pipeline_bench
from rollstream.dev.bench.publisher import PublisherBenchConfig, run_publisher_bench
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.dev.bench.state import StateBenchConfig, run_state_bench
from rollstream.dev.bench.suite import ORDER, record_run
from rollstream.dev.bench.wall import WallBenchConfig, run_wall_bench
from rollstream.settings import KafkaSettings


def _bench_kafka(kafka: KafkaSettings) -> KafkaSettings:
    """The settings with a topic prefix of this run's own, so the real topics stay untouched."""
    return kafka.model_copy(update={"topic_prefix": f"bench-{int(time.time())}"})


@click.command(name="publisher")
@output_options
@click.option(
    "--records",
    type=click.IntRange(1),
    default=PublisherBenchConfig.records,
    show_default=True,
    help="Throughput: CallRecords per encoding and round.",
)
@click.option(
    "--rounds", type=click.IntRange(1), default=PublisherBenchConfig.rounds, show_default=True
)
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=PublisherBenchConfig.partitions,
    show_default=True,
)
@settings_options(KafkaSettings, "kafka")
def publisher(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    records: int,
    rounds: int,
    partitions: int,
) -> None:
    """CallRecords/s from one capture publisher, and the broker bytes of a 50-call session.

    Delta-encoded prompts against the naive full-prompt encoding (and against records that
    also carry the harness's request), side by side. Needs a broker (`rollstream kafka
    start`); its topics, under the prefix `bench-<time>`, are deleted after each measurement.
    """
    config = PublisherBenchConfig(records=records, rounds=rounds, partitions=partitions)
    click.echo("publisher: CallRecords/s and session bytes on the broker, per encoding")
    result = asyncio.run(run_publisher_bench(config, _bench_kafka(kafka), click.echo))
    data = record(json_path, "publisher", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@click.command(name="outage")
@output_options
@click.option(
    "--outage-s",
    type=click.FloatRange(0, min_open=True),
    default=OutageBenchConfig.outage_s,
    show_default=True,
    help="How long the broker is away.",
)
@click.option(
    "--rate",
    type=click.FloatRange(0, min_open=True),
    default=OutageBenchConfig.rate,
    show_default=True,
    help="Records a second, throughout.",
)
def outage(json_path: Path, markdown: Path, outage_s: float, rate: float) -> None:
    """How late the event loop wakes while the publisher spools and drains, per disk mode.

    The spool's disk work on the loop (the old way) against on the publisher's disk thread,
    side by side; starts brokers of its own (no running broker needed).
    """
    config = OutageBenchConfig(outage_s=outage_s, rate=rate)
    click.echo("outage: the publisher's disk work on the event loop, against on its own thread")
    result = asyncio.run(run_outage_bench(config, click.echo))
    data = record(json_path, "outage", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@click.command(name="state")
@output_options
@click.option(
    "--seconds",
    type=click.FloatRange(0, min_open=True),
    default=StateBenchConfig.seconds,
    show_default=True,
    help="How long a partition's load is simulated.",
)
@settings_options(KafkaSettings, "kafka")
def state(kafka: KafkaSettings, json_path: Path, markdown: Path, seconds: float) -> None:
    """The reconstructor's state topic at a cluster's load: bytes/s and a new owner's read.

    The emitted map rewritten whole in every transaction (before) against written as it
    changes (now), side by side. Needs a broker (`rollstream kafka start`); its topics, under
    the prefix `bench-<time>`, are deleted afterwards.
    """
    config = StateBenchConfig(seconds=seconds)
    click.echo("state: the state topic's writes and reads, per layout")
    result = asyncio.run(run_state_bench(config, _bench_kafka(kafka), click.echo))
    data = record(json_path, "state", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@click.command(name="long-session")
@output_options
@click.option(
    "--calls",
    type=click.IntRange(2),
    multiple=True,
    help="Sessions of this many calls (repeatable; default: 1,500, and 10,000 compacted every "
    "300 calls).",
)
@settings_options(KafkaSettings, "kafka")
def long_session(
    kafka: KafkaSettings, json_path: Path, markdown: Path, calls: tuple[int, ...]
) -> None:
    """Long sessions with a break at every call through the local stack: bytes and memory.

    Needs a broker (`rollstream kafka start`); each session gets a stack of its own (`up`) under
    a temporary directory and topics under the prefix `bench-<time>`, deleted afterwards.
    """
    known = {run.calls: run for run in RUNS}
    runs = [known.get(n, LongRun(n)) for n in calls] if calls else list(RUNS)
    bench_kafka = _bench_kafka(kafka)
    out = []
    try:
        with tempfile.TemporaryDirectory(prefix="rollstream-long-") as tmp:
            for run in runs:
                click.echo(f"long-session: {run.calls} calls ({run.instruction})")
                out.append(run_session(bench_kafka, run, Path(tmp), f"long-{run.calls}"))
                click.echo(
                    f"  {out[-1]['segments']} segments, {out[-1]['trajectory_bytes']:,} bytes, "
                    f"client peak {out[-1]['client_peak_mb']} MB"
                )
    finally:
        asyncio.run(delete_topics(bench_kafka))
    data = record(json_path, "long-session", {"runs": out})
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@click.command(name="wall")
@output_options
@click.option("--rounds", type=click.IntRange(1), default=WallBenchConfig.rounds, show_default=True)
@click.option(
    "--starts",
    type=click.IntRange(1),
    default=WallBenchConfig.starts,
    show_default=True,
    help="Processes started per round and mode.",
)
def wall(json_path: Path, markdown: Path, rounds: int, starts: int) -> None:
    """What a session's network wall costs: process start and relayed traffic, vs none.

    Side by side in the same rounds; needs user namespaces (no broker, no interceptor).
    """
    config = WallBenchConfig(rounds=rounds, starts=starts)
    click.echo("wall: walled against direct, process start and relayed traffic")
    result = asyncio.run(run_wall_bench(config, click.echo))
    data = record(json_path, "wall", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@click.command(name="pipeline")
@output_options
@click.option(
    "--sessions",
    type=click.IntRange(1),
    default=PipelineBenchConfig.sessions,
    show_default=True,
    help="Throughput: sessions prefilled into the events topic.",
)
@click.option(
    "--calls",
    type=click.IntRange(1),
    default=PipelineBenchConfig.calls,
    show_default=True,
    help="Throughput: calls per session (prompts grow 8k tokens + 490 a call).",
)
@click.option(
    "--rate",
    type=click.FloatRange(0, min_open=True),
    default=PipelineBenchConfig.rate,
    show_default=True,
    help="End to end: sessions arriving per second.",
)
@click.option(
    "--duration",
    type=click.FloatRange(0, min_open=True),
    default=PipelineBenchConfig.duration_s,
    show_default=True,
    help="End to end: seconds of arrivals.",
)
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=PipelineBenchConfig.partitions,
    show_default=True,
)
@settings_options(KafkaSettings, "kafka")
def pipeline(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    sessions: int,
    calls: int,
    rate: float,
    duration: float,
    partitions: int,
) -> None:
    """Reconstructor calls/s and scorer trajectories/s through Kafka, SessionEnded → Scored.

    Runs `rollstream reconstruct` and `rollstream score` as subprocesses. Needs a broker
    (`rollstream kafka start`); its topics, under the prefix `bench-<time>`, are deleted
    afterwards.
    """
    config = PipelineBenchConfig(
        sessions=sessions, calls=calls, rate=rate, duration_s=duration, partitions=partitions
    )
    bench_kafka = _bench_kafka(kafka)

    async def run() -> dict[str, object]:
        try:
            return await run_pipeline_bench(config, bench_kafka, click.echo)
        finally:
            await delete_topics(bench_kafka)

    click.echo("pipeline: reconstructor and scorer through Kafka, then end to end")
    result = asyncio.run(run())
    data = record(json_path, "pipeline", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


async def _broker_answers(kafka: KafkaSettings) -> bool:
    from rollstream.kafka.admin import TopicAdmin

    try:
        async with asyncio.timeout(15):
            async with TopicAdmin(kafka) as admin:
                await admin.list_topics()
    except Exception:  # any failure: the benchmarks that need it would fail the same way
        return False
    return True


@click.command(name="all")
@output_options
@click.option(
    "--skip",
    multiple=True,
    type=click.Choice(ORDER),
    help="Leave this benchmark out (repeatable).",
)
@click.pass_context
def all_benchmarks(
    ctx: click.Context, json_path: Path, markdown: Path, skip: tuple[str, ...]
) -> None:
    """Every benchmark with its default configuration, one after another, then RESULTS.md.

    Runs backend, interceptor, stream, node, wall, reconstruct, publisher, outage, state, cluster,
    pipeline, instances, scale, long-session and fidelity (those that exist), each merging its
    results into
    --json;
    regenerates --markdown once at the end, with the machine description at the top. A
    benchmark that fails does not stop the others; the command then exits with 1. Needs a broker
    (`rollstream kafka start`); cluster starts brokers of its own besides.
    """
    group = ctx.parent.command if ctx.parent is not None else None
    commands = group.commands if isinstance(group, click.Group) else {}
    names = [name for name in ORDER if name in commands and name not in skip]
    kafka = KafkaSettings()
    if not asyncio.run(_broker_answers(kafka)):
        raise click.ClickException(
            f"no Kafka broker answers at {kafka.bootstrap_servers}: start one with "
            "`rollstream kafka start` (or set ROLLSTREAM_BOOTSTRAP_SERVERS)"
        )
    ran: list[str] = []
    failed: list[str] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "RESULTS.md"  # each benchmark's own rewrite; ours comes last
        for name in names:
            click.echo(f"== bench {name} ({len(ran) + len(failed) + 1} of {len(names)})")
            try:
                ctx.invoke(commands[name], json_path=json_path, markdown=scratch)
            except Exception as exc:  # one benchmark failing must not lose the others' runs
                failed.append(name)
                click.echo(f"bench {name} failed: {type(exc).__name__}: {exc}", err=True)
            else:
                ran.append(name)
    data = record_run(json_path, ran, failed, time.monotonic() - began)
    write_markdown(data, markdown)
    click.echo(f"ran {', '.join(ran) or 'nothing'}; results in {json_path}, summary in {markdown}")
    if failed:
        raise click.ClickException(f"failed: {', '.join(failed)}")
