"""``rollstream bench``."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Literal

import click

from rollstream.cli.bench_common import (
    delete_topics,
    engine_option,
    output_options,
    results_name,
)
from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.dev.bench.backend import BackendBenchConfig, run_backend_bench
from rollstream.dev.bench.interceptor import (
    VLLM_SIZES,
    InterceptorBenchConfig,
    run_interceptor_bench,
)
from rollstream.dev.bench.node import NodeBenchConfig, run_node_bench
from rollstream.dev.bench.reconstruct import ReconstructBenchConfig, run_reconstruct_bench
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.settings import KafkaSettings


@click.group(cls=Group, short_help="Benchmarks into a JSON file and a generated RESULTS.md.")
def bench() -> None:
    """Benchmarks; results go to a JSON file and a generated RESULTS.md."""


@bench.command(name="backend")
@output_options
@click.option(
    "--concurrency", default="1,50,200,400", show_default=True, help="Levels, comma-separated."
)
@click.option("--max-tokens", default=200, show_default=True)
@click.option("--tpot-ms", default=20.0, show_default=True, help="Time per output token (ms).")
@click.option("--ttft-ms", default=50.0, show_default=True)
@click.option(
    "--policy", type=click.Choice(["tiny", "scripted"]), default="tiny", show_default=True
)
def backend(
    json_path: Path,
    markdown: Path,
    concurrency: str,
    max_tokens: int,
    tpot_ms: float,
    ttft_ms: float,
    policy: str,
) -> None:
    """Streamed tokens/s and concurrent streams of the reference backend on one core."""
    config = BackendBenchConfig(
        concurrency=tuple(int(c) for c in concurrency.split(",")),
        max_tokens=max_tokens,
        tpot_ms=tpot_ms,
        ttft_ms=ttft_ms,
        policy=policy,
    )
    click.echo(f"reference backend, {policy} policy, {max_tokens} tokens per stream:")
    result = asyncio.run(run_backend_bench(config, progress=click.echo))
    data = record(json_path, "backend", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@bench.command(name="interceptor")
@output_options
@click.option("--calls", type=int, help="Long-prompt calls per path [default: 120, vllm 24].")
@click.option("--streams", type=int, help="Concurrent streams for TTFT [default: 32, vllm 8].")
@engine_option("serving qwen3's tiny model, at smaller sizes")
@settings_options(KafkaSettings, "kafka")
def interceptor(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    calls: int | None,
    streams: int | None,
    engine: Literal["reference", "vllm"],
) -> None:
    """Direct vs plain mitmproxy vs rollstream: proxy CPU per call and added TTFT.

    Needs a broker for rollstream's records (`rollstream kafka start`); they go to topics under
    the prefix `bench-<time>` so the run leaves the real topics alone.
    """
    import time

    from rollstream.kafka.admin import TopicAdmin
    from rollstream.schemas import TopicNames, topic_specs

    prefix = f"bench-{int(time.time())}"
    # A tiny model on the CPU build prefills an 8k prompt in about a second: the vLLM run is
    # smaller, so three paths in three rounds take minutes, not an hour.
    base = InterceptorBenchConfig() if engine == "reference" else VLLM_SIZES
    config = replace(
        base, calls=calls or base.calls, streams=streams or base.streams, engine=engine
    )

    async def run() -> dict[str, object]:
        async with TopicAdmin(kafka) as admin:
            await admin.create(topic_specs(TopicNames(prefix), partitions=1))
        return await run_interceptor_bench(config, kafka.bootstrap_servers, prefix, click.echo)

    click.echo(f"interceptor: direct, plain mitmproxy, rollstream, on {engine}")
    result = asyncio.run(run())
    data = record(json_path, results_name("interceptor", engine), result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@bench.command(name="reconstruct")
@output_options
@click.option(
    "--sessions",
    default=ReconstructBenchConfig.sessions,
    show_default=True,
    help="Throughput: sessions per round.",
)
@click.option(
    "--calls",
    default=ReconstructBenchConfig.calls,
    show_default=True,
    help="Throughput: calls per session (prompts grow 8k tokens + 490 a call).",
)
@click.option("--rounds", default=ReconstructBenchConfig.rounds, show_default=True)
@click.option(
    "--rate",
    default=ReconstructBenchConfig.rate,
    show_default=True,
    help="End to end: sessions produced per second.",
)
@click.option(
    "--duration",
    default=ReconstructBenchConfig.duration_s,
    show_default=True,
    help="End to end: seconds of production.",
)
@click.option(
    "--e2e-calls",
    default=ReconstructBenchConfig.e2e_calls,
    show_default=True,
    help="End to end: calls per session.",
)
@click.option("--partitions", default=ReconstructBenchConfig.partitions, show_default=True)
@click.option("--e2e/--no-e2e", default=True, show_default=True, help="Also measure through Kafka.")
@click.option(
    "--long-calls",
    default=",".join(map(str, ReconstructBenchConfig.long_calls)),
    show_default=True,
    help="Long sessions: calls per session, comma-separated (contexts grow to 100k tokens); "
    "empty to skip.",
)
@settings_options(KafkaSettings, "kafka")
def reconstruct(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    sessions: int,
    calls: int,
    rounds: int,
    rate: float,
    duration: float,
    e2e_calls: int,
    partitions: int,
    e2e: bool,
    long_calls: str,
) -> None:
    """Reconstruction calls/s, SessionEnded → trajectory latency, long sessions' cost per call.

    The long-session part times sessions of 100 to 10,000 calls in-process. The end-to-end
    part needs a broker (`rollstream kafka start`) and runs the reconstructor service on
    topics under the prefix `bench-<time>`, deleted afterwards.
    """
    import time

    config = ReconstructBenchConfig(
        sessions=sessions,
        calls=calls,
        rounds=rounds,
        rate=rate,
        duration_s=duration,
        e2e_calls=e2e_calls,
        partitions=partitions,
        e2e=e2e,
        long_calls=tuple(int(n) for n in long_calls.split(",") if n.strip()),
    )
    bench_kafka = kafka.model_copy(update={"topic_prefix": f"bench-{int(time.time())}"})

    async def run() -> dict[str, object]:
        try:
            return await run_reconstruct_bench(config, bench_kafka if e2e else None, click.echo)
        finally:
            if e2e:
                await delete_topics(bench_kafka)

    click.echo("reconstruct: throughput per process, then end to end through Kafka")
    result = asyncio.run(run())
    data = record(json_path, "reconstruct", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@bench.command(name="node")
@output_options
@click.option(
    "--sessions",
    type=click.IntRange(1, 3000),
    default=NodeBenchConfig.sessions,
    show_default=True,
    help="Sessions per round and mode (one task's samples, submitted at once).",
)
@click.option("--rounds", type=click.IntRange(1), default=NodeBenchConfig.rounds, show_default=True)
@click.option(
    "--max-init", type=click.IntRange(1), default=NodeBenchConfig.max_init, show_default=True
)
@click.option(
    "--max-run", type=click.IntRange(1), default=NodeBenchConfig.max_run, show_default=True
)
@click.option(
    "--max-post", type=click.IntRange(1), default=NodeBenchConfig.max_post, show_default=True
)
@click.option(
    "--prewarm",
    type=click.IntRange(1),
    default=NodeBenchConfig.prewarm,
    show_default=True,
    help="Pre-warming of the mode compared with prewarm=0.",
)
@click.option(
    "--setup-s",
    type=click.FloatRange(0),
    default=NodeBenchConfig.setup_s,
    show_default=True,
    help="Seconds the setup command sleeps (init cost).",
)
@click.option(
    "--run-s",
    type=click.FloatRange(0),
    default=NodeBenchConfig.run_s,
    show_default=True,
    help="Seconds the harness command sleeps.",
)
@click.option(
    "--files",
    type=click.IntRange(0),
    default=NodeBenchConfig.files,
    show_default=True,
    help="Inline workspace files per session.",
)
@click.option(
    "--work-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where session directories go (default: the temp dir).",
)
@click.option(
    "--runtime",
    type=click.Choice(["local", "docker"]),
    default="local",
    show_default=True,
    help="docker: the same rounds in containers too, side by side with the local runtime, and "
    "a container's start and removal cost (the engine DOCKER_HOST names).",
)
@click.option(
    "--image",
    default=NodeBenchConfig.image,
    show_default=True,
    help="The sessions' image with --runtime docker (it needs bash and sleep).",
)
def node(
    json_path: Path,
    markdown: Path,
    sessions: int,
    rounds: int,
    max_init: int,
    max_run: int,
    max_post: int,
    prewarm: int,
    setup_s: float,
    run_s: float,
    files: int,
    work_root: Path | None,
    runtime: str,
    image: str,
) -> None:
    """Sessions/minute of one node with the `command` harness, with and without pre-warming.

    No Kafka: lifecycle records and call counts stay in the process. The local runtime, and
    with --runtime docker the docker runtime beside it in the same rounds.
    """
    config = NodeBenchConfig(
        sessions=sessions,
        rounds=rounds,
        max_init=max_init,
        max_run=max_run,
        max_post=max_post,
        prewarm=prewarm,
        setup_s=setup_s,
        run_s=run_s,
        files=files,
        runtimes=("local", "docker") if runtime == "docker" else ("local",),
        image=image,
    )
    click.echo(
        f"node: {sessions} sessions per round, max_init={max_init} max_run={max_run}, "
        f"prewarm=0 vs prewarm={prewarm}, runtimes {', '.join(config.runtimes)}, {rounds} rounds"
    )
    if work_root is not None:
        work_root.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run_node_bench(config, click.echo, work_root))
    data = record(json_path, "node", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


@bench.command(name="fidelity")
@output_options
@click.option("--families", default="all", show_default=True, help="Comma-separated.")
@click.option("--harnesses", default="all", show_default=True, help="Comma-separated.")
@click.option("--modes", default="ordinary,exact", show_default=True, help="Context modes.")
@click.option("--timeout-s", type=click.FloatRange(1), default=180.0, show_default=True)
@engine_option("serving each family's tiny model (the families the engine serves)")
@settings_options(KafkaSettings, "kafka")
def fidelity(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    families: str,
    harnesses: str,
    modes: str,
    timeout_s: float,
    engine: Literal["reference", "vllm"],
) -> None:
    """Model families x real harnesses x context modes: how faithfully each session trains.

    Each harness runs headless on one tool task through an interceptor in front of the
    scripted reference backend serving each family, or a real vLLM serving its tiny model
    (`--engine vllm`: the families the engine serves; one server per family, one at a time).
    Needs a broker (`rollstream kafka start`) and the harnesses (installed if missing); records
    go to topics under the prefix `bench-<time>`, deleted afterwards.
    """
    import time

    from rollstream.dev.bench import fidelity as fb
    from rollstream.dev.bench.fidelity_serving import FidelityBenchConfig
    from rollstream.dev.engine.families import ENGINE_FAMILIES
    from rollstream.models.families import FAMILIES
    from rollstream.sandbox.harnesses.install import PACKAGES, install
    from rollstream.settings import StatePaths

    known = tuple(ENGINE_FAMILIES) if engine == "vllm" else tuple(FAMILIES)
    try:
        config = FidelityBenchConfig(
            families=fb.parse_names(families, known, "families"),
            harnesses=fb.parse_names(harnesses, tuple(PACKAGES), "harnesses"),
            modes=fb.parse_modes(modes),
            timeout_s=timeout_s,
            engine=engine,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    bin_dir = install(StatePaths().cache_dir)
    bench_kafka = kafka.model_copy(update={"topic_prefix": f"bench-{int(time.time())}"})

    async def run() -> dict[str, object]:
        try:
            return await fb.run_fidelity_bench(config, bench_kafka, bin_dir, click.echo)
        finally:
            await delete_topics(bench_kafka)

    click.echo(
        f"fidelity: {len(config.families)} families x {len(config.harnesses)} harnesses x "
        f"{len(config.modes)} modes on {engine}"
    )
    result = asyncio.run(run())
    data = record(json_path, results_name("fidelity", engine), result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")


def _register_more() -> None:
    """Subcommands defined in their own modules, so this one stays small."""
    from rollstream.cli.bench_scale import scale
    from rollstream.cli.bench_scaleout import cluster, instances
    from rollstream.cli.bench_stream import stream
    from rollstream.cli.bench_suite import (
        all_benchmarks,
        long_session,
        outage,
        pipeline,
        publisher,
        state,
        wall,
    )

    for command in (
        publisher,
        outage,
        state,
        cluster,
        pipeline,
        instances,
        scale,
        stream,
        wall,
        long_session,
    ):
        bench.add_command(command)
    bench.add_command(all_benchmarks)


_register_more()
