"""``rollstream report``: one self-contained HTML page of a run's scored records."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from rollstream.cli.options import settings_options, since_option
from rollstream.dev.report.settings import ReportSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.command(name="report", short_help="An HTML page of a run's scored records.")
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
    """Write an HTML page of --topic's trajectories: tokens by loss mask, rewards, groups.

    Reads without a consumer group from the beginning (or --since) up to the end seen at
    start; Ctrl+C or SIGTERM stops reading and writes the page of what was read.
    """
    from rollstream.dev.backend.tokenizer import default_tokenizer_dir
    from rollstream.dev.report import read_report_input, render_report
    from rollstream.models.tokenizer import ChatTokenizer

    tokenizer = ChatTokenizer(settings.tokenizer or default_tokenizer_dir())

    async def main(stop: StopSignal) -> tuple[str, str]:
        found = await read_report_input(
            kafka,
            topic,
            since=since,
            max_trajectories=settings.max_trajectories,
            stop=stop.stopping,
        )
        generated = datetime.now(UTC).isoformat(timespec="seconds")
        since_note = f", since {since.isoformat()}" if since is not None else ""
        notes = [
            *found.notes(),
            f"generated {generated}{since_note}; tokens decoded with {tokenizer.path}",
        ]
        page = render_report(
            found.records,
            tokenizer,
            tokens_per_segment=settings.tokens_per_segment,
            more=found.more,
            notes=notes,
        )
        return page, found.notes()[0]

    page, line = run_service(main)
    out.write_text(page, encoding="utf-8")
    click.echo(f"{out}: {line}")
