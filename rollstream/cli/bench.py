"""``rollstream bench``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from rollstream.bench.backend import BackendBenchConfig, run_backend_bench
from rollstream.bench.interceptor import InterceptorBenchConfig, run_interceptor_bench
from rollstream.bench.report import record, write_markdown
from rollstream.cli.options import settings_options
from rollstream.settings import KafkaSettings


def _output_options(func: click.decorators.FC) -> click.decorators.FC:
    """``--json`` (results, merged with other benchmarks') and ``--markdown`` (the summary)."""
    func = click.option(
        "--markdown",
        type=click.Path(path_type=Path),
        default=Path("bench/RESULTS.md"),
        show_default=True,
    )(func)
    return click.option(
        "--json",
        "json_path",
        type=click.Path(path_type=Path),
        default=Path("bench/results.json"),
        show_default=True,
    )(func)


@click.group()
def bench() -> None:
    """Benchmarks; results go to a JSON file and a generated RESULTS.md."""


@bench.command(name="backend")
@_output_options
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
@_output_options
@click.option(
    "--calls",
    default=InterceptorBenchConfig.calls,
    show_default=True,
    help="8k-token calls per path.",
)
@click.option(
    "--streams",
    default=InterceptorBenchConfig.streams,
    show_default=True,
    help="Concurrent streams for TTFT.",
)
@settings_options(KafkaSettings, "kafka")
def interceptor(
    kafka: KafkaSettings, json_path: Path, markdown: Path, calls: int, streams: int
) -> None:
    """Direct vs plain mitmproxy vs rollstream: proxy CPU per call and added TTFT.

    Needs a broker for rollstream's records (`rollstream kafka start`); they go to topics under
    the prefix `bench-<time>` so the run leaves the real topics alone.
    """
    import time

    from rollstream.admin import TopicAdmin
    from rollstream.schemas import TopicNames, topic_specs

    prefix = f"bench-{int(time.time())}"

    async def run() -> dict[str, object]:
        async with TopicAdmin(kafka) as admin:
            await admin.create(topic_specs(TopicNames(prefix), partitions=1))
        config = InterceptorBenchConfig(calls=calls, streams=streams)
        return await run_interceptor_bench(config, kafka.bootstrap_servers, prefix, click.echo)

    click.echo("interceptor: direct, plain mitmproxy, rollstream")
    result = asyncio.run(run())
    data = record(json_path, "interceptor", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")
