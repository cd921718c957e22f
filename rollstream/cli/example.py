"""``rollstream example-trainer``: the example GRPO trainer on the tiny model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from rollstream.cli.options import settings_options
from rollstream.consumers.trainer import TrainerSettings
from rollstream.dev.examples.settings import ExampleTrainerSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.command(name="example-trainer", short_help="The example GRPO trainer on the tiny model.")
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write every step's report as JSON here when the trainer stops.",
)
@settings_options(ExampleTrainerSettings, "settings")
@settings_options(TrainerSettings, "stream")
@settings_options(KafkaSettings, "kafka")
def example_trainer(
    report: Path | None,
    settings: ExampleTrainerSettings,
    stream: TrainerSettings,
    kafka: KafkaSettings,
) -> None:
    """GRPO on the reference backend's tiny model: scored groups in, new weights out.

    Each update syncs the weights into the backend (the interceptor paused and drained meanwhile)
    and publishes the next policy version, which new calls and sessions are stamped with.
    """
    from rollstream.dev.examples.grpo_trainer import ExampleTrainer, StepReport, report_dicts

    async def main(stop: StopSignal) -> list[StepReport]:
        async with ExampleTrainer(settings, stream, kafka) as trainer:
            click.echo(
                f"training on {trainer.stream.topic} as {settings.consumer_group} "
                f"(weights {trainer.digest})",
                err=True,
            )
            work = asyncio.create_task(trainer.run())
            halt = asyncio.create_task(stop.event.wait())
            await asyncio.wait({work, halt}, return_when=asyncio.FIRST_COMPLETED)
            for task in (work, halt):
                task.cancel()
            await asyncio.gather(work, halt, return_exceptions=True)
            if work.done() and not work.cancelled() and work.exception() is not None:
                raise work.exception()  # type: ignore[misc]
        return trainer.reports

    reports = run_service(main)
    for step in reports:
        click.echo(step.line(), err=True)
    if report is not None:
        report.write_text(json.dumps(report_dicts(reports), indent=1))
