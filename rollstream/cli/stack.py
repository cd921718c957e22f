"""``rollstream up``, ``status`` and ``down``: the local stack as processes."""

from __future__ import annotations

import asyncio

import click

from rollstream.cli.options import settings_options
from rollstream.dev.broker.settings import BrokerSettings
from rollstream.dev.stack.local import LocalStack
from rollstream.dev.stack.settings import StackSettings
from rollstream.kafka.admin import TopicsSettings
from rollstream.lifecycle import StopSignal, run_service
from rollstream.settings import KafkaSettings, StatePaths


@click.command()
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
    stack = LocalStack(settings, paths, BrokerSettings(), topics)

    async def main(stop: StopSignal) -> None:
        await stack.up(kafka, lambda line: click.echo(line, err=True))
        click.echo(f"up; logs in {stack.logs}; `rollstream status`, `rollstream down`", err=True)
        if not detach:
            await stop.event.wait()

    try:
        run_service(main)
    finally:
        if not detach:
            _report_down(stack)


def _report_down(stack: LocalStack) -> None:
    for name, outcome in stack.down():
        click.echo(f"{name:<14} {outcome}", err=True)


@click.command()
@settings_options(StatePaths, "paths")
def status(paths: StatePaths) -> None:
    """Each service of the local stack, consumer lags and the records per topic."""
    stack = LocalStack(StackSettings(), paths)
    report = asyncio.run(stack.status())
    click.echo(report.table())
    if not all(c.healthy for c in report.components):
        raise SystemExit(1)


@click.command()
@settings_options(StatePaths, "paths")
def down(paths: StatePaths) -> None:
    """Stop the local stack (services in reverse order, then the broker if `up` started it)."""
    stack = LocalStack(StackSettings(), paths)
    if stack.state() is None:
        click.echo(f"no stack is up in {paths.state_dir}", err=True)
        return
    _report_down(stack)
