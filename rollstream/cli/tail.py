"""``rollstream tail TOPIC``."""

from __future__ import annotations

import sys

import click

from rollstream.cli.options import settings_options
from rollstream.kafka.tail import TailOptions, tail
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.command(name="tail", short_help="Decode and print the records of a topic.")
@click.argument("topic")
@click.option("-f", "--follow", is_flag=True, help="Keep waiting for new records (Ctrl+C stops).")
@click.option("--from-end", is_flag=True, help="Skip the records already in the topic.")
@click.option("-n", "--max-records", type=int, default=None, help="Stop after N records.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["pretty", "json"]),
    default="pretty",
    show_default=True,
    help="pretty: a header and indented record; json: one JSON object per line.",
)
@settings_options(KafkaSettings, "kafka")
def tail_command(
    kafka: KafkaSettings,
    topic: str,
    follow: bool,
    from_end: bool,
    max_records: int | None,
    fmt: str,
) -> None:
    """Decode and print the records of TOPIC (events, trajectories, ... or a full name).

    Reads from the beginning and stops at the end unless --follow; uses no consumer group.
    Records that cannot be decoded are shown as UNDECODABLE and the rest keep flowing.
    """
    options = TailOptions(topic, from_end, follow, max_records, fmt)

    async def main(stop: StopSignal) -> tuple[int, int]:
        return await tail(kafka, options, sys.stdout, stop.stopping)

    printed, undecodable = run_service(main)
    click.echo(f"-- {printed} records, {undecodable} undecodable", err=True)
