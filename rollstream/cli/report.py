"""``rollstream report``: the console's views of a run's records, in one file with no server."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from rollstream.cli.options import settings_options, since_option
from rollstream.consumers.console.settings import ReportSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.command(name="report", short_help="The console's views of a run, in one HTML file.")
@click.option(
    "--topic",
    default="scored",
    show_default=True,
    help="scored, trajectories, trajectories.NAME (a replay's output) or a full topic name.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    required=True,
    help="HTML file to create (replaced if it exists).",
)
@since_option
@settings_options(ReportSettings, "settings")
@settings_options(KafkaSettings, "kafka")
def report(
    topic: str,
    out: Path,
    since: datetime | None,
    settings: ReportSettings,
    kafka: KafkaSettings,
) -> None:
    """Write one HTML file of --topic's trajectories, opened with no server.

    It holds the console's sessions, groups, rewards and trajectory pages (tokens by loss mask,
    calls on a timeline).

    Reads without a consumer group from the beginning (or --since) up to the end seen at
    start; Ctrl+C or SIGTERM stops reading and writes the page of what was read.
    """
    from rollstream.consumers.console import Assets
    from rollstream.consumers.console.report import read_calls, read_report_input, report_data
    from rollstream.consumers.console.trajectory_view import TokenTexts
    from rollstream.dev.backend.tokenizer import default_tokenizer_dir
    from rollstream.models.tokenizer import ChatTokenizer

    assets = Assets()
    assets.require()  # before reading: a missing front end is said at once
    tokenizer = ChatTokenizer(settings.tokenizer or default_tokenizer_dir())

    async def main(stop: StopSignal) -> tuple[str, str]:
        found = await read_report_input(
            kafka,
            topic,
            since=since,
            max_trajectories=settings.max_trajectories,
            stop=stop.stopping,
        )
        calls = await read_calls(kafka, found.records, since)
        generated = datetime.now(UTC).isoformat(timespec="seconds")
        since_note = f", since {since.isoformat()}" if since is not None else ""
        notes = [
            *found.notes(),
            f"generated {generated}{since_note}; tokens decoded with {tokenizer.path}",
        ]
        data = report_data(
            found,
            TokenTexts(tokenizer),
            calls,
            notes=notes,
            generated=generated,
            tokens_per_segment=settings.tokens_per_segment,
        )
        return assets.static_page(data, title=f"rollstream report: {found.topic}"), notes[0]

    page, line = run_service(main)
    out.write_text(page, encoding="utf-8")
    click.echo(f"{out}: {line}")
