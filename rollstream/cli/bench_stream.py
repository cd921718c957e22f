"""``rollstream bench stream``: streamed tokens, plain mitmproxy vs rollstream, 1 and 2 workers.

Registered on the ``bench`` group by :mod:`rollstream.cli.bench`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import click

from rollstream.cli.bench_common import delete_topics, output_options
from rollstream.cli.options import settings_options
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.dev.bench.stream import StreamBenchConfig, run_stream_bench
from rollstream.dev.bench.stream_report import verdicts
from rollstream.settings import KafkaSettings


@click.command(name="stream")
@output_options
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    default=StreamBenchConfig.max_tokens,
    show_default=True,
    help="Tokens per answer.",
)
@click.option(
    "--sessions",
    type=click.IntRange(1),
    default=StreamBenchConfig.sessions,
    show_default=True,
    help="Concurrent sessions, each its own key and connection, calls in a row.",
)
@click.option(
    "--duration",
    type=click.FloatRange(0, min_open=True),
    default=StreamBenchConfig.duration_s,
    show_default=True,
    help="Seconds of load per path and round.",
)
@click.option(
    "--rounds", type=click.IntRange(1), default=StreamBenchConfig.rounds, show_default=True
)
@click.option(
    "--router/--no-router",
    default=StreamBenchConfig.router,
    show_default=True,
    help="Also two workers reached through the pool's router (one address).",
)
@click.option(
    "--clients",
    type=click.IntRange(1),
    default=StreamBenchConfig.clients,
    show_default=True,
    help="Load-generator processes sharing the sessions.",
)
@settings_options(KafkaSettings, "kafka")
def stream(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    max_tokens: int,
    sessions: int,
    duration: float,
    rounds: int,
    router: bool,
    clients: int,
) -> None:
    """Streamed tokens/s and proxy CPU per token: plain mitmproxy vs rollstream, 1 and 2 workers.

    The reference backend streams long answers as fast as it can through each path in turn
    (rounds alternating the order); the CPU of every proxy process, the backend, the load and
    the machine is read from /proc, so the summary says what bounds the run. Needs a broker
    (`rollstream kafka start`); the records go to topics under the prefix `bench-<time>`,
    deleted afterwards once they are counted.
    """
    from rollstream.kafka.admin import TopicAdmin
    from rollstream.schemas import TopicNames, topic_specs

    config = StreamBenchConfig(
        max_tokens=max_tokens,
        sessions=sessions,
        duration_s=duration,
        rounds=rounds,
        router=router,
        clients=clients,
    )
    bench_kafka = kafka.model_copy(update={"topic_prefix": f"bench-{int(time.time())}"})

    async def run() -> dict[str, Any]:
        try:
            async with TopicAdmin(bench_kafka) as admin:
                await admin.create(topic_specs(TopicNames(bench_kafka.topic_prefix), 3))
            return await run_stream_bench(config, bench_kafka, click.echo)
        finally:
            await delete_topics(bench_kafka)

    click.echo(
        f"stream: {sessions} sessions of {max_tokens}-token answers, {duration:g} s per path, "
        f"{rounds} rounds: {', '.join(config.paths)}"
    )
    result = asyncio.run(run())
    result["targets"] = verdicts(result).as_dict()
    data = record(json_path, "stream", result)
    write_markdown(data, markdown)
    click.echo(f"results in {json_path}, summary in {markdown}")
