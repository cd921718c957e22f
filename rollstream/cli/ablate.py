"""``rollstream ablate``: several strategies over the retained sessions, side by side."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import click

from rollstream.cli.options import settings_options, since_option
from rollstream.settings import KafkaSettings

DEFAULT_STRATEGIES = "per_call,prefix_merge,prompt_prefix_merge,tree,retokenize"


@click.command(
    name="ablate",
    short_help="Compare reconstruction strategies on the retained sessions.",
)
@click.option(
    "--strategies",
    default=DEFAULT_STRATEGIES,
    show_default=True,
    help="Strategy names or module:function paths, comma-separated.",
)
@since_option
@click.option("--session", "sessions", multiple=True, help="Only these session ids.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("ablation"),
    show_default=True,
    help="Folder for ablation.md, ablation.json and ablation.png.",
)
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Tokenizer folder given to every strategy (retokenize needs one). "
    "Default: the one shipped with rollstream.",
)
@settings_options(KafkaSettings, "kafka")
def ablate(
    strategies: str,
    since: datetime | None,
    sessions: tuple[str, ...],
    out: Path,
    tokenizer: Path | None,
    kafka: KafkaSettings,
) -> None:
    """Run each strategy over every retained session with calls and compare them.

    Reads the events topic from the beginning (or --since) up to its end at start; prints a
    Markdown table (sessions, segments per session, tokens, merge rate, invariant violations,
    break reasons) and writes it with JSON and a PNG chart to --out.
    """
    from rollstream.consumers.reconstruct.ablation import ablate as run_ablation
    from rollstream.consumers.reconstruct.ablation import write_all
    from rollstream.consumers.reconstruct.strategies import get_strategy
    from rollstream.dev.backend.tokenizer import default_tokenizer_dir
    from rollstream.kafka.reading import read_session_calls
    from rollstream.models.tokenizer import ChatTokenizer

    names = [name.strip() for name in strategies.split(",") if name.strip()]
    if not names:
        raise click.UsageError("--strategies names no strategy")
    for name in names:
        get_strategy(name)  # an unknown name fails before Kafka is read
    chat_tokenizer = ChatTokenizer(tokenizer or default_tokenizer_dir())
    read = asyncio.run(read_session_calls(kafka, since=since, sessions=set(sessions) or None))
    click.echo(
        f"ablate: {len(read.calls)} sessions with calls in {read.records} records "
        f"({read.undecodable} undecodable skipped)",
        err=True,
    )
    report = run_ablation(read.calls, names, chat_tokenizer)
    paths = write_all(report, out)
    click.echo(paths["markdown"].read_text())
    click.echo(f"written: {', '.join(str(p) for p in paths.values())}", err=True)
