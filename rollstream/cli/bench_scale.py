"""``rollstream bench scale``: concurrent streaming sessions through one interceptor process.

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
from rollstream.dev.bench.scale import ScaleBenchConfig, run_scale_bench
from rollstream.settings import KafkaSettings


@click.command(name="scale")
@output_options
@click.option(
    "--sessions",
    type=click.IntRange(1),
    default=ScaleBenchConfig.sessions,
    show_default=True,
    help="Sessions at once, each with its own connection and key.",
)
@click.option(
    "--turns",
    type=click.IntRange(1),
    default=ScaleBenchConfig.turns,
    show_default=True,
    help="Streamed calls per session, one after another (growing conversation).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    default=ScaleBenchConfig.max_tokens,
    show_default=True,
    help="Tokens per answer.",
)
@click.option(
    "--ttft-ms",
    type=click.FloatRange(0),
    default=ScaleBenchConfig.ttft_ms,
    show_default=True,
    help="Backend latency model: time to first token (ms).",
)
@click.option(
    "--tpot-ms",
    type=click.FloatRange(0),
    default=ScaleBenchConfig.tpot_ms,
    show_default=True,
    help="Backend latency model: time per output token (ms).",
)
@click.option(
    "--clients",
    type=click.IntRange(1),
    default=ScaleBenchConfig.clients,
    show_default=True,
    help="Load-generator processes sharing the sessions.",
)
@settings_options(KafkaSettings, "kafka")
def scale(
    kafka: KafkaSettings,
    json_path: Path,
    markdown: Path,
    sessions: int,
    turns: int,
    max_tokens: int,
    ttft_ms: float,
    tpot_ms: float,
    clients: int,
) -> None:
    """Concurrent streaming sessions through one interceptor process: errors, RSS, CPU.

    The interceptor runs pinned to its own core in front of the reference backend, whose
    latency model keeps every session's stream open at once. Needs a broker (`rollstream
    kafka start`); the records go to topics under the prefix `bench-<time>`, deleted
    afterwards once they are counted.
    """
    from rollstream.kafka.admin import TopicAdmin
    from rollstream.schemas import TopicNames, topic_specs

    config = ScaleBenchConfig(
        sessions=sessions,
        turns=turns,
        max_tokens=max_tokens,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        clients=clients,
    )
    bench_kafka = kafka.model_copy(update={"topic_prefix": f"bench-{int(time.time())}"})

    async def run() -> dict[str, Any]:
        try:
            async with TopicAdmin(bench_kafka) as admin:
                await admin.create(topic_specs(TopicNames(bench_kafka.topic_prefix), 3))
            return await run_scale_bench(config, bench_kafka, click.echo)
        finally:
            await delete_topics(bench_kafka)

    click.echo(f"scale: {sessions} concurrent streaming sessions through one interceptor")
    result = asyncio.run(run())
    data = record(json_path, "scale", result)
    write_markdown(data, markdown)
    verdict = "met" if result["target"]["met"] else "MISSED"
    click.echo(f"target {verdict}; results in {json_path}, summary in {markdown}")
