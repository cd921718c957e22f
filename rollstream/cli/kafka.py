"""``rollstream kafka fetch|start|run|secrets|stop|status``: the local broker or cluster."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.dev.broker import (
    BrokerSettings,
    ClusterInfo,
    LocalBroker,
    LocalCluster,
    acls,
    local_kafka,
)
from rollstream.dev.broker.jars import ensure_jars, jar_dir
from rollstream.dev.broker.secure import SecureFiles, make_material
from rollstream.settings import KafkaSettings, StatePaths


@click.group(cls=Group, short_help="A local Kafka broker or cluster (KRaft) from Maven jars.")
def kafka() -> None:
    """Run a local Apache Kafka broker, or a cluster of several, from Maven Central jars."""


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
    """Start the broker (or --nodes N of them as one cluster) and wait until it is ready.

    With --secure, its ACLs name the topics under ROLLSTREAM_TOPIC_PREFIX.
    """
    local = local_kafka(broker, paths, topic_prefix=KafkaSettings().topic_prefix)
    already = local.running()
    info = local.start()
    if isinstance(info, ClusterInfo):
        pids = ", ".join(str(n.pid) for n in info.nodes)
        what = f"a cluster of {len(info.nodes)} nodes (pids {pids})"
        took = info.startup_seconds
    else:
        what, took = f"pid {info.pid}", info.startup_seconds
    if already:
        click.echo(f"already running: {what}, {info.bootstrap_servers}")
    else:
        click.echo(
            f"Kafka {info.version} ready in {took:.1f}s: {what}, "
            f"{info.bootstrap_servers}, data in {info.data_dir}"
        )
    click.echo(f"export ROLLSTREAM_BOOTSTRAP_SERVERS={info.bootstrap_servers}")
    if isinstance(local, LocalBroker) and local.secure is not None:
        files = local.secure
        click.echo(
            "export ROLLSTREAM_SECURITY_PROTOCOL=SASL_SSL ROLLSTREAM_SASL_MECHANISM=SCRAM-SHA-512 "
            f"ROLLSTREAM_SSL_CAFILE={files.ca_cert}"
        )
        click.echo(
            "# and per service ROLLSTREAM_SASL_USERNAME=<principal> "
            f"ROLLSTREAM_SASL_PASSWORD_FILE={files.password_file('<principal>')}"
        )


@kafka.command()
@_broker_command
def run(broker: BrokerSettings, paths: StatePaths) -> None:
    """Run one broker in the foreground until SIGTERM or SIGINT: a container's main process.

    The broker dies with this command and stops (controlled shutdown) on its signal; the
    command exits 1 if the broker exits first. Its log is in DATA_DIR/logs. Compose's
    local-kafka.yml runs the broker service this way.
    """
    if broker.nodes != 1:
        raise click.UsageError("kafka run runs one node; `kafka start --nodes N` runs a cluster")
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    prefix = KafkaSettings().topic_prefix  # a secure broker's ACLs name its topics
    local = LocalBroker(broker, paths, outlive_parent=False, topic_prefix=prefix)
    if local.running() is not None:
        raise click.ClickException(f"a broker already runs on {local.data_dir}")
    info = local.start()
    click.echo(
        f"Kafka {info.version} ready in {info.startup_seconds:.1f}s: pid {info.pid}, "
        f"{info.bootstrap_servers}, data in {info.data_dir}"
    )
    sys.stdout.flush()
    while not stopping.is_set():
        if local.wait_exit(info.pid, 1.0):
            local.forget()
            raise click.ClickException(f"the broker exited; its log is in {info.data_dir}/logs")
    local.stop()
    click.echo("stopped")


@kafka.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--owner",
    metavar="UID:GID",
    help="Give the files (not the CA's key) to this user, e.g. 10001:10001, the user of "
    "rollstream's image: a container reads a Compose secret with the host file's owner and "
    "mode. Needs root.",
)
def secrets(directory: Path, owner: str | None) -> None:
    """Make a secure broker's CA, certificate and each principal's password in DIRECTORY.

    For a broker and services that run apart: Compose's secure-kafka.yml mounts DIRECTORY into
    the broker (ROLLSTREAM_KAFKA_SECURE_DIR) and each service's own password, users/PRINCIPAL,
    into that service alone. What exists is kept, so it is safe to repeat.
    """
    ids = None
    if owner is not None:
        uid, sep, gid = owner.partition(":")
        if not (uid.isdigit() and (not sep or gid.isdigit())):
            raise click.BadParameter(f"{owner!r} is not UID[:GID]", param_hint="--owner")
        ids = (int(uid), int(gid or uid))
    files = SecureFiles(directory.resolve())
    try:
        made = make_material(files, acls.service_principals(), ids)
    except PermissionError as exc:
        raise click.ClickException(
            f"{exc.filename}: {exc.strerror} (--owner needs root: run it with sudo)"
        ) from None
    for path in made:
        click.echo(path)


@kafka.command()
@_broker_command
def stop(broker: BrokerSettings, paths: StatePaths) -> None:
    """Stop the broker or every node of the cluster (controlled shutdown; killed after 30 s)."""
    if local_kafka(broker, paths).stop():
        click.echo("stopped")
    else:
        click.echo("not running")


@kafka.command()
@click.option("--json", "as_json", is_flag=True, help="Print the broker record as JSON.")
@_broker_command
def status(broker: BrokerSettings, paths: StatePaths, as_json: bool) -> None:
    """Show whether the broker (or every node) runs and answers; exit code 1 if not.

    A node counts as running only while its recorded pid is alive and runs Kafka on that node's
    configuration; the record of one that is not (killed, the machine restarted) is removed.
    """
    local = local_kafka(broker, paths)
    info = local.running()
    if info is None:
        nodes = _nodes(local)
        if as_json:
            click.echo(json.dumps({"running": False, "healthy": False, "nodes": nodes}))
        elif isinstance(local, LocalCluster):
            alive = [n["node_id"] for n in nodes if n["pid"] is not None]
            each = ", ".join(
                f"node {n['node_id']} " + (f"pid {n['pid']}" if n["pid"] else "stopped")
                for n in nodes
            )
            click.echo(f"not running: {len(alive)} of {local.size} nodes alive {alive} ({each})")
        else:
            click.echo("not running")
        sys.exit(1)
    healthy = local.healthy()
    if as_json:
        click.echo(json.dumps({"running": True, "healthy": healthy, **json.loads(info.to_json())}))
    else:
        state = "running" if healthy else "running but not answering metadata requests"
        if isinstance(info, ClusterInfo):
            each = ", ".join(f"node {n.node_id} pid {n.pid}" for n in info.nodes)
            what = f"a cluster of {len(info.nodes)} nodes ({each})"
        else:
            what = f"pid {info.pid}"
        click.echo(
            f"{state}: {what}, Kafka {info.version}, {info.bootstrap_servers}, "
            f"data in {info.data_dir}, jars in {jar_dir(paths.cache_dir, info.version)}"
        )
    sys.exit(0 if healthy else 1)


def _nodes(local: LocalBroker | LocalCluster) -> list[dict[str, Any]]:
    """Each node of a cluster, its id and pid (None: stopped); none for a single broker."""
    if not isinstance(local, LocalCluster):
        return []
    return [{"node_id": n, "pid": local.pid(n)} for n in range(1, local.size + 1)]
