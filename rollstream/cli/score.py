"""``rollstream score``: the scorer service."""

from __future__ import annotations

import click

from rollstream.cli.options import settings_options
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.command(name="score", short_help="Evaluate each trajectory into one Scored record.")
@settings_options(ScoreSettings, "settings")
@settings_options(KafkaSettings, "kafka")
def score(settings: ScoreSettings, kafka: KafkaSettings) -> None:
    """Evaluate each trajectory and emit one Scored record for it, exactly once.

    The evaluator is the one the trajectory's task names (command, exact_match, regex, python,
    session_completed), else --default-evaluator. Run more instances with the same --group-id to
    scale out.
    """
    from rollstream.consumers.score.service import Scorer

    async def main(stop: StopSignal) -> None:
        async with Scorer(settings, kafka) as service:
            click.echo(
                f"scoring {service.input} (group {settings.group_id}, "
                f"{settings.concurrency} at a time) into {service.output}",
                err=True,
            )
            await service.run(stop.event)
            click.echo(service.progress(), err=True)

    run_service(main)
