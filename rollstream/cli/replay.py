"""``rollstream replay``: rebuild retained events with a strategy into a topic of their own."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import click

from rollstream.cli.options import settings_options, since_option
from rollstream.settings import KafkaSettings


@click.command(name="replay", short_help="Rebuild the retained events with a strategy, to a topic.")
@click.option("--strategy", required=True, help="Strategy name or module:function.")
@click.option("--to", "to", required=True, help="Output: <prefix>.trajectories.<TO>.")
@click.option("--from-beginning", is_flag=True, help="Read the whole retained log (default).")
@since_option
@click.option("--session", "sessions", multiple=True, help="Only these session ids.")
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    default=None,
    help="Tokenizer folder (retokenize strategy).",
)
@settings_options(KafkaSettings, "kafka")
def replay(
    strategy: str,
    to: str,
    from_beginning: bool,
    since: datetime | None,
    sessions: tuple[str, ...],
    tokenizer: Path | None,
    kafka: KafkaSettings,
) -> None:
    """Rebuild the events retained in Kafka with STRATEGY, up to the end seen at start."""
    from rollstream.consumers.reconstruct.replay import replay as run_replay
    from rollstream.models.tokenizer import ChatTokenizer

    if from_beginning and since is not None:
        raise click.UsageError("--from-beginning and --since exclude each other")
    report = asyncio.run(
        run_replay(
            kafka,
            strategy,
            to,
            since=since,
            sessions=set(sessions) or None,
            tokenizer=ChatTokenizer(tokenizer) if tokenizer else None,
            progress=lambda line: click.echo(line, err=True),
        )
    )
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(report.by_status.items())) or "none"
    click.echo(
        f"{report.trajectories} trajectories into {report.topic} ({statuses}) from "
        f"{report.records} records; {report.unfinished_sessions} sessions still running, "
        f"{report.undecodable} undecodable records skipped, "
        f"{report.in_parts} trajectories in several records (over the record budget)"
    )
