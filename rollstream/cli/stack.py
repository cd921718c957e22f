"""``rollstream stack up|status|down``: the local stack as processes.

``rollstream up``, ``status`` and ``down``, the first spelling, stay as hidden aliases
(registered in :mod:`rollstream.cli`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.dev.broker.settings import BrokerSettings
from rollstream.dev.stack.settings import StackSettings
from rollstream.kafka.admin import TopicsSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings, StatePaths

if TYPE_CHECKING:
    from rollstream.dev.stack.local import LocalStack


@click.group(cls=Group, short_help="The local stack (Kafka and every service) as processes.")
def stack() -> None:
    """The local stack as processes: start it, see its state, stop it.

    `rollstream up`, `status` and `down` still work as aliases of these commands.
    """


@stack.command(short_help="Start Kafka and every service, each healthy before the next.")
@click.option(
    "--detach", is_flag=True, help="Return once everything is healthy (stop with `down`)."
)
@settings_options(StackSettings, "settings")
@settings_options(TopicsSettings, "topics")
@settings_options(KafkaSettings, "kafka")
@settings_options(StatePaths, "paths")
def up(
    detach: bool,
    settings: StackSettings,
    topics: TopicsSettings,
    kafka: KafkaSettings,
    paths: StatePaths,
) -> None:
    """Start the local stack: Kafka, topics, backend (or vLLM), interceptor, consumers, node.

    Each service waits for the previous one to be healthy. Without --detach it runs until
    Ctrl+C (or SIGTERM) and then brings everything down.
    """
    # Imported here so that `rollstream --help` works without the 'dev' extra.
    from rollstream.dev.stack.local import LocalStack

    local = LocalStack(settings, paths, BrokerSettings(), topics)

    async def main(stop: StopSignal) -> None:
        await local.up(kafka, lambda line: click.echo(line, err=True))
        click.echo(
            f"up; logs in {local.logs}; `rollstream stack status`, `rollstream stack down`",
            err=True,
        )
        if not detach:
            await stop.event.wait()

    try:
        run_service(main)
    finally:
        if not detach:
            _report_down(local)


def _report_down(local: LocalStack) -> None:
    for name, outcome in local.down():
        click.echo(f"{name:<14} {outcome}", err=True)


@stack.command(short_help="Each service, consumer group lags, records per topic.")
@settings_options(StatePaths, "paths")
def status(paths: StatePaths) -> None:
    """Each service of the local stack, consumer lags and the records per topic."""
    from rollstream.dev.stack.local import LocalStack

    report = asyncio.run(LocalStack(StackSettings(), paths).status())
    click.echo(report.table())
    if not all(c.healthy for c in report.components):
        raise SystemExit(1)


@stack.command(short_help="Stop every service in reverse order, then the broker it started.")
@settings_options(StatePaths, "paths")
def down(paths: StatePaths) -> None:
    """Stop the local stack (services in reverse order, then the broker if `up` started it)."""
    from rollstream.dev.stack.local import LocalStack

    local = LocalStack(StackSettings(), paths)
    if local.state() is None:
        click.echo(f"no stack is up in {paths.state_dir}", err=True)
        return
    _report_down(local)
