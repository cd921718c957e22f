"""``rollstream kafka fetch|start|stop|status``: the local broker."""

from __future__ import annotations

import json
import sys

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.dev.broker import BrokerSettings, LocalBroker
from rollstream.dev.broker.jars import ensure_jars, jar_dir
from rollstream.settings import StatePaths


@click.group(cls=Group, short_help="A local Kafka broker (KRaft, one node) from Maven jars.")
def kafka() -> None:
    """Run a local Apache Kafka broker (KRaft, one node) from Maven Central jars."""


def _broker_command(func: click.decorators.FC) -> click.decorators.FC:
    func = settings_options(BrokerSettings, "broker")(func)
    return settings_options(StatePaths, "paths")(func)


@kafka.command()
@_broker_command
def fetch(broker: BrokerSettings, paths: StatePaths) -> None:
    """Fetch the broker's jars with Maven into the cache (done once)."""
    lib = ensure_jars(paths.cache_dir, broker.version, broker.mvn)
    size = sum(f.stat().st_size for f in lib.iterdir())
    click.echo(f"Kafka {broker.version} jars in {lib} ({size / 1e6:.1f} MB)")


@kafka.command()
@_broker_command
def start(broker: BrokerSettings, paths: StatePaths) -> None:
    """Start the broker in the background and wait until it is ready."""
    local = LocalBroker(broker, paths)
    already = local.running()
    info = local.start()
    if already:
        click.echo(f"already running: pid {info.pid}, {info.bootstrap_servers}")
    else:
        click.echo(
            f"Kafka {info.version} ready in {info.startup_seconds:.1f}s: pid {info.pid}, "
            f"{info.bootstrap_servers}, data in {info.data_dir}"
        )
    click.echo(f"export ROLLSTREAM_BOOTSTRAP_SERVERS={info.bootstrap_servers}")


@kafka.command()
@_broker_command
def stop(broker: BrokerSettings, paths: StatePaths) -> None:
    """Stop the broker (controlled shutdown; killed after 30 s)."""
    if LocalBroker(broker, paths).stop():
        click.echo("stopped")
    else:
        click.echo("not running")


@kafka.command()
@click.option("--json", "as_json", is_flag=True, help="Print the broker record as JSON.")
@_broker_command
def status(broker: BrokerSettings, paths: StatePaths, as_json: bool) -> None:
    """Show whether the broker runs and answers; exit code 1 if not."""
    local = LocalBroker(broker, paths)
    info = local.running()
    if info is None:
        click.echo("not running")
        sys.exit(1)
    healthy = local.healthy()
    if as_json:
        click.echo(json.dumps({"healthy": healthy, **json.loads(info.to_json())}))
    else:
        state = "running" if healthy else "running but not answering metadata requests"
        click.echo(
            f"{state}: pid {info.pid}, Kafka {info.version}, {info.bootstrap_servers}, "
            f"data in {info.data_dir}, jars in {jar_dir(paths.cache_dir, info.version)}"
        )
    sys.exit(0 if healthy else 1)
