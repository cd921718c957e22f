"""``rollstream check``: verify the faithfulness invariant over a topic of trajectories."""

from __future__ import annotations

import asyncio

import click

from rollstream.cli.options import settings_options
from rollstream.settings import KafkaSettings


@click.command(name="check", short_help="Check every trajectory of a topic against its calls.")
@click.argument("topic", default="trajectories")
@click.option("--show", default=20, show_default=True, help="Violations to print.")
@settings_options(KafkaSettings, "kafka")
def check(topic: str, show: int, kafka: KafkaSettings) -> None:
    """Check every trajectory in TOPIC against its calls; exit 1 on any violation."""
    from rollstream.consumers.reconstruct.check import check_topic

    report = asyncio.run(check_topic(kafka, topic, lambda line: click.echo(line, err=True)))
    for trajectory_id, violation in report.violations[:show]:
        click.echo(
            f"{trajectory_id} segment {violation.segment} call {violation.call_id} "
            f"at {violation.position}: {violation.kind}: {violation.detail}"
        )
    click.echo(
        f"{report.trajectories} trajectories checked: {len(report.violations)} violations; "
        f"{report.relaxed} from relaxing strategies ({report.relaxed_violations} expected "
        f"departures); {report.missing_sessions} without retained calls"
    )
    if report.violations:
        raise SystemExit(1)
