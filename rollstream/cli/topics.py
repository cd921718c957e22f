"""``rollstream topics create|list|describe``."""

from __future__ import annotations

import asyncio

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.kafka.admin import TopicAdmin, TopicsSettings
from rollstream.schemas.topics import Topic, TopicNames, topic_specs
from rollstream.settings import KafkaSettings


@click.group(cls=Group, short_help="Create and inspect rollstream's topics.")
def topics() -> None:
    """Create and inspect rollstream's topics."""


@topics.command()
@settings_options(KafkaSettings, "kafka")
@settings_options(TopicsSettings, "sizing")
def create(kafka: KafkaSettings, sizing: TopicsSettings) -> None:
    """Create every rollstream topic that does not exist yet (safe to repeat)."""

    async def run() -> None:
        specs = topic_specs(
            TopicNames(kafka.topic_prefix), sizing.partitions, sizing.retention_days
        )
        async with TopicAdmin(kafka) as admin:
            reports = await admin.create(specs, sizing.replication_factor)
        for report in reports:
            state = "created" if report.created else "exists"
            click.echo(f"{report.name:<32} {state:<8} partitions={report.partitions}")
            for key, (want, have) in sorted(report.drift.items()):
                click.echo(f"    config drift: {key} is {have!r}, rollstream wants {want!r}")

    asyncio.run(run())


@topics.command(name="list")
@click.option("--all", "show_all", is_flag=True, help="Also list topics that are not ours.")
@settings_options(KafkaSettings, "kafka")
def list_(kafka: KafkaSettings, show_all: bool) -> None:
    """List the topics of the cluster (rollstream's, or all)."""

    async def run() -> None:
        names = TopicNames(kafka.topic_prefix)
        async with TopicAdmin(kafka) as admin:
            for name in await admin.list_topics():
                logical = names.logical(name)
                if logical is not None or show_all:
                    click.echo(f"{name:<32} {logical.value if logical else ''}")

    asyncio.run(run())


@topics.command()
@click.argument("names", nargs=-1)
@settings_options(KafkaSettings, "kafka")
def describe(kafka: KafkaSettings, names: tuple[str, ...]) -> None:
    """Partitions, configs and record counts of NAMES (logical or full; default: all of ours)."""

    async def run() -> None:
        topic_names = TopicNames(kafka.topic_prefix)
        wanted = [topic_names.resolve(n) for n in names] or [topic_names[t] for t in Topic]
        async with TopicAdmin(kafka) as admin:
            for d in await admin.describe(wanted):
                click.echo(f"{d.name}: {d.partitions} partitions, ~{d.records} records")
                for key, value in sorted(d.configs.items()):
                    click.echo(f"    {key}={value}")
                for p, (begin, end) in sorted(d.offsets.items()):
                    click.echo(f"    partition {p}: leader {d.leaders[p]}, offsets {begin}..{end}")

    asyncio.run(run())
