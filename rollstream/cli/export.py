"""``rollstream export``: scored records (or trajectories) to JSONL or Parquet."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click

from rollstream.cli.options import settings_options, since_option
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.command(name="export", short_help="Scored records (or trajectories) to JSONL or Parquet.")
@click.option(
    "--topic",
    default="scored",
    show_default=True,
    help="scored, trajectories, trajectories.NAME (a replay's output) or a full topic name.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "parquet"]),
    default=None,
    help="Output format. Default: from the suffix of --out (.jsonl, .parquet).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    required=True,
    help="File to create (replaced if it exists).",
)
@click.option(
    "--min-reward",
    type=float,
    default=None,
    help="Keep scored trajectories with a reward at least this (drops those without one).",
)
@since_option
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="After the end, keep exporting new records until Ctrl+C or SIGTERM.",
)
@click.option(
    "--row-group-rows",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Parquet: rows per row group.",
)
@click.option(
    "--flush-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="Parquet: seconds rows may wait before their row group is written.",
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="Seconds between progress lines on stderr.",
)
@settings_options(KafkaSettings, "kafka")
def export(
    topic: str,
    fmt: str | None,
    out: Path,
    min_reward: float | None,
    since: datetime | None,
    follow: bool,
    row_group_rows: int,
    flush_interval: float,
    progress_interval: float,
    kafka: KafkaSettings,
) -> None:
    """Write one row per trajectory segment of --topic's records to a JSONL or Parquet file.

    Reads without a consumer group, from the beginning (or --since) up to the end seen at
    start, or on until stopped with --follow. Progress goes to stderr every few seconds.
    """
    from rollstream.consumers.export import ExportOptions, format_for
    from rollstream.consumers.export import export as run_export

    options = ExportOptions(
        out=out,
        fmt=format_for(out, fmt),
        topic=topic,
        min_reward=min_reward,
        since=since,
        follow=follow,
        group_rows=row_group_rows,
        flush_interval_s=flush_interval,
        progress_interval_s=progress_interval,
    )

    async def main(stop: StopSignal) -> str:
        report = await run_export(
            kafka, options, stop.stopping, lambda line: click.echo(line, err=True)
        )
        return report.summary()

    click.echo(run_service(main))
