"""``rollstream smoke``."""

from __future__ import annotations

import asyncio

import click

from rollstream.cli.options import settings_options
from rollstream.dev.smoke import run_smoke
from rollstream.settings import KafkaSettings


@click.command(short_help="One synthetic session through the broker and back.")
@click.option("--turns", type=click.IntRange(1, 500), default=5, show_default=True)
@settings_options(KafkaSettings, "kafka")
def smoke(kafka: KafkaSettings, turns: int) -> None:
    """Send one synthetic session through the broker and check it reads back intact."""
    result = asyncio.run(run_smoke(kafka, turns))
    click.echo(
        f"smoke ok: session {result.session_id}: {result.records} records "
        f"({result.calls} calls) produced in a transaction and read back with read_committed; "
        f"{result.encoded_bytes} bytes encoded, prompts alone would be "
        f"{result.full_prompt_bytes} bytes without delta encoding"
    )
