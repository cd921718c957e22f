"""``rollstream demo``: the whole loop on this machine in a few minutes (what `make demo` runs)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Literal

import click

from rollstream.cli.options import settings_options
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import StatePaths


@click.command(name="demo", short_help="The whole loop on this machine in a few minutes.")
@click.option(
    "--harness", default=None, help="Harness to run (default: pi, or python without npm)."
)
@click.option("--samples", type=int, default=4, show_default=True, help="Samples per task.")
@click.option("--timeout", type=float, default=240, show_default=True, help="Seconds per stage.")
@click.option(
    "--context",
    type=click.Choice(["ordinary", "exact"]),
    default="ordinary",
    show_default=True,
    help="The interceptor's context mode: exact keeps each conversation one segment "
    "(docs/exact-context.md).",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("rollstream-demo.html"),
    show_default=True,
    help="Where to write the HTML report.",
)
@settings_options(StatePaths, "paths")
def demo_command(
    harness: str | None,
    samples: int,
    timeout: float,
    context: Literal["ordinary", "exact"],
    report_path: Path,
    paths: StatePaths,
) -> None:
    """Bring the local stack up, run a few coding tasks on a real harness, train, report, down.

    Three tasks of several samples run through the interceptor against the reference backend;
    their trajectories are reconstructed and scored, the example trainer takes one GRPO step
    per group, and a last session shows the trained policy version on new calls.
    """
    from rollstream.dev.demo.run import DemoOptions, demo

    async def main(stop: StopSignal) -> str:
        work = asyncio.create_task(
            demo(
                DemoOptions(harness, samples, timeout, context),
                paths,
                report_path,
                lambda line: click.echo(line, err=True),
            )
        )
        halt = asyncio.create_task(stop.event.wait())
        await asyncio.wait({work, halt}, return_when=asyncio.FIRST_COMPLETED)
        halt.cancel()
        if not work.done():  # Ctrl+C: the demo's own clean-up brings the stack down
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            raise click.ClickException("interrupted; the stack is down")
        result = work.result()
        return f"{result.table}\n\nreport: {result.report}"

    click.echo("\n" + run_service(main))
