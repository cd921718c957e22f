"""``rollstream reconstruct``: the reconstructor service."""

from __future__ import annotations

import click

from rollstream.cli.extras import require_extra
from rollstream.cli.options import settings_options
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings


@click.command(name="reconstruct", short_help="Rebuild each session's calls into one trajectory.")
@settings_options(ReconstructSettings, "settings")
@settings_options(KafkaSettings, "kafka")
def reconstruct(settings: ReconstructSettings, kafka: KafkaSettings) -> None:
    """Rebuild each session's calls into one trajectory, exactly once (a consumer group).

    Run more instances with the same --strategy to scale out.
    """
    require_extra("consumers")
    from rollstream.consumers.reconstruct.service import Reconstructor

    async def main(stop: StopSignal) -> None:
        async with Reconstructor(settings, kafka) as service:
            click.echo(
                f"reconstructing {kafka.topic_prefix}.events with {settings.strategy} "
                f"(group {settings.group_id}) into {service.output}",
                err=True,
            )
            await service.run(stop.event)
            click.echo(service.progress(), err=True)

    run_service(main)
