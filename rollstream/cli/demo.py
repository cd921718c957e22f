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
@click.option(
    "--hold/--no-hold",
    default=False,
    help="Keep the stack and the console up after the run, until Ctrl+C.",
)
@settings_options(StatePaths, "paths")
def demo_command(
    harness: str | None,
    samples: int,
    timeout: float,
    context: Literal["ordinary", "exact"],
    report_path: Path,
    hold: bool,
    paths: StatePaths,
) -> None:
    """Bring the local stack up, run a few coding tasks on a real harness, train, report, down.

    Three tasks of several samples run through the interceptor against the reference backend;
    their trajectories are reconstructed and scored, the example trainer takes one GRPO step
    per group, and a last session shows the trained policy version on new calls. The console
    (`rollstream console`) watches it all; its URL is printed once the stack is up.
    """
    from rollstream.dev.demo.run import DemoOptions, demo

    async def main(stop: StopSignal) -> str:
        options = DemoOptions(harness, samples, timeout, context, stop.event if hold else None)
        work = asyncio.create_task(
            demo(
                options,
                paths,
                report_path,
                lambda line: click.echo(line, err=True),
            )
        )
        halt = asyncio.create_task(stop.event.wait())
        await asyncio.wait({work, halt}, return_when=asyncio.FIRST_COMPLETED)
        halt.cancel()
        if hold and options.holding:  # Ctrl+C ends the hold: the demo goes down by itself
            await work
        if not work.done():  # Ctrl+C: the demo's own clean-up brings the stack down
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            raise click.ClickException("interrupted; the stack is down")
        result = work.result()
        return f"{result.table}\n\nreport: {result.report}"

    click.echo("\n" + run_service(main))
