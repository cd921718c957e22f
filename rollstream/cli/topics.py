"""``rollstream topics create|list|describe|replicate``."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.kafka.admin import TopicAdmin, TopicReport, TopicsSettings
from rollstream.kafka.replication import MIN_INSYNC, ReassignmentReport
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
            TopicNames(kafka.topic_prefix),
            sizing.partitions,
            sizing.retention_days,
            sizing.replication_factor,
            sizing.min_insync_replicas,
        )
        async with TopicAdmin(kafka) as admin:
            reports = await admin.create(specs)
        for report in reports:
            _echo_created(report)
        if any(r.needs_replicas for r in reports):
            click.echo(
                "hint: `rollstream topics replicate` adds the missing replicas through Kafka's "
                "reassignment, then sets min.insync.replicas"
            )

    asyncio.run(run())


_REPLICATION_KEYS = ("replication_factor", MIN_INSYNC)


def _echo_created(report: TopicReport) -> None:
    state = "created" if report.created else "exists"
    click.echo(
        f"{report.name:<32} {state:<8} partitions={report.partitions} replicas={report.replicas}"
    )
    for key, (want, have) in sorted(report.drift.items()):
        kind = "replication" if key in _REPLICATION_KEYS else "config"
        click.echo(f"    {kind} drift: {key} is {have!r}, rollstream wants {want!r}")


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
                    click.echo(
                        f"    partition {p}: leader {d.leaders[p]}, "
                        f"replicas {_ids(d.replicas.get(p, ()))}, isr {_ids(d.isr.get(p, ()))}, "
                        f"offsets {begin}..{end}"
                    )

    asyncio.run(run())


def _ids(brokers: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, brokers)) + "]"


@topics.command()
@click.argument("names", nargs=-1)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    help="Replicas every partition should have. Default: 3, or as many as the cluster has "
    "brokers if fewer. [env: ROLLSTREAM_TOPICS_REPLICATION_FACTOR]",
)
@click.option(
    "--min-insync-replicas",
    type=click.IntRange(min=1),
    help="min.insync.replicas to set once the replicas are in sync. Default: the replication "
    "factor minus 1 (at least 1). [env: ROLLSTREAM_TOPICS_MIN_INSYNC_REPLICAS]",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait until the added replicas are in sync, then set min.insync.replicas.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Seconds to wait for the replicas to catch up.",
)
@settings_options(KafkaSettings, "kafka")
def replicate(
    kafka: KafkaSettings,
    names: tuple[str, ...],
    replication_factor: int | None,
    min_insync_replicas: int | None,
    wait: bool,
    timeout: float,
) -> None:
    """Add replicas to existing topics NAMES (default: all of ours) via Kafka's reassignment.

    Kafka copies each partition to the added brokers while it stays readable and writable;
    the current replicas and leader stay. Never removes replicas. Safe to repeat: a run
    with --no-wait, or one that timed out, is finished by running it again.
    """
    given: dict[str, Any] = {
        "replication_factor": replication_factor,
        "min_insync_replicas": min_insync_replicas,
    }
    sizing = TopicsSettings(**{k: v for k, v in given.items() if v is not None})

    async def run() -> list[ReassignmentReport]:
        topic_names = TopicNames(kafka.topic_prefix)
        async with TopicAdmin(kafka) as admin:
            wanted = [topic_names.resolve(n) for n in names] or [
                n
                for n in await admin.list_topics()
                if topic_names.logical(n) or n.startswith(f"{topic_names.trajectories}.")
            ]

            if not wanted:
                raise click.ClickException(
                    f"no topics under the prefix {kafka.topic_prefix!r}: "
                    "`rollstream topics create` makes them"
                )

            def progress(done: int, total: int) -> None:
                click.echo(f"  {done}/{total} partitions have their new replicas in sync")

            return await admin.add_replicas(
                wanted,
                sizing.replication_factor,
                sizing.min_insync_replicas,
                wait=wait,
                timeout=timeout,
                progress=progress,
            )

    reports = asyncio.run(run())
    for report in reports:
        click.echo(f"{report.topic:<32} {_replication_line(report)}")
    if wait and not all(r.in_sync for r in reports):
        raise click.ClickException(
            f"replicas still catching up after {timeout:.0f}s; `rollstream topics describe` "
            "shows them, and running this again finishes the job"
        )
    if any(not r.min_insync_set for r in reports):
        click.echo(
            "run `rollstream topics replicate` again once in sync to set min.insync.replicas"
        )


def _replication_line(report: ReassignmentReport) -> str:
    factor = report.replication_factor
    if report.reassigned:
        before = sorted({len(b) for b, _ in report.reassigned.values()})
        count = len(report.reassigned)
        grown = f"{count} partition{'s' if count != 1 else ''} {before[0]} -> {factor} replicas"
    else:
        grown = f"has {factor}+ replicas"
    state = "in sync" if report.in_sync else "catching up"
    if report.min_insync is None:
        insync = ""
    elif report.min_insync_set:
        insync = f", {MIN_INSYNC} {report.min_insync[0]} -> {report.min_insync[1]}"
    else:
        insync = f", {MIN_INSYNC} stays {report.min_insync[0]} until in sync"
    return f"{grown}, {state}{insync}"
