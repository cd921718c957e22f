"""The broker's generated configuration: ports, server.properties and the log4j2 config."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollstream.errors import BrokerError
from rollstream.host import HOST, free_port, pick_port, port_is_free

if TYPE_CHECKING:
    from rollstream.dev.broker.settings import BrokerSettings

__all__ = ["HOST", "free_port", "pick_port", "port_is_free"]

log = logging.getLogger(__name__)

#: A single node's record in its data directory: cluster id, controller port, security.
IDENTITY_FILE = "rollstream-broker.json"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
READY_LINE = "Kafka Server started"


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (22 characters).

    Like Kafka's own ``Uuid.randomUuid``, never one starting with ``-``: command-line parsers
    (the storage tool's among them) take such a value for an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass(frozen=True)
class NodeIdentity:
    """One node of a local cluster: what it keeps across restarts.

    ``voters`` is the static KRaft voter set, ``id@host:controller_port`` per node; every node
    of the cluster gets the same one, and a restarted node must come back on the same ports.
    """

    node_id: int
    port: int
    controller_port: int
    cluster_id: str
    voters: str
    nodes: int


def replication_for(nodes: int) -> tuple[int, int]:
    """The replication factor and ``min.insync.replicas`` rollstream uses on ``nodes`` brokers.

    Three replicas where there are three brokers, and writes acknowledged by two of them: one
    broker may be down (a restart, a crash) without refusing ``acks=all`` writes, and no
    acknowledged write lives on a single disk.
    """
    replicas = min(3, max(1, nodes))
    return replicas, max(1, replicas - 1)


@dataclass(frozen=True)
class BrokerLayout:
    """The files and ports of one broker instance."""

    data_dir: Path
    port: int
    controller_port: int
    identity: NodeIdentity | None = None

    @property
    def node_id(self) -> int:
        """The KRaft node id (1 for a single broker)."""
        return self.identity.node_id if self.identity else 1

    @property
    def bootstrap_servers(self) -> str:
        """Address clients connect to."""
        return f"{HOST}:{self.port}"

    @property
    def log_dirs(self) -> Path:
        """Kafka's partition data."""
        return self.data_dir / "data"

    @property
    def logs_dir(self) -> Path:
        """The broker's own log files."""
        return self.data_dir / "logs"

    @property
    def server_log(self) -> Path:
        """The log readiness is read from."""
        return self.logs_dir / "server.log"

    @property
    def stdout_log(self) -> Path:
        """JVM standard output and error (start-up failures land here)."""
        return self.logs_dir / "stdout.log"

    @property
    def server_properties(self) -> Path:
        """The generated broker configuration."""
        return self.data_dir / "server.properties"

    @property
    def log4j2_properties(self) -> Path:
        """The generated logging configuration."""
        return self.data_dir / "log4j2.properties"


def render_server_properties(layout: BrokerLayout, overrides: dict[str, str] | None = None) -> str:
    """A combined broker+controller KRaft config for one node (alone or in a cluster)."""
    identity = layout.identity
    replicas, min_isr = replication_for(identity.nodes if identity else 1)
    quorum = (
        {"controller.quorum.voters": identity.voters}
        if identity
        else {"controller.quorum.bootstrap.servers": f"{HOST}:{layout.controller_port}"}
    )
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(layout.node_id),
        **quorum,
        "listeners": f"PLAINTEXT://{HOST}:{layout.port},CONTROLLER://{HOST}:{layout.controller_port}",
        "advertised.listeners": (
            f"PLAINTEXT://{HOST}:{layout.port},CONTROLLER://{HOST}:{layout.controller_port}"
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(layout.log_dirs),
        # Internal topics as replicated as ours: a broker down must not stop transactions.
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
        # Tests create many consumer groups; the default 3 s delay would dominate their runtime.
        "group.initial.rebalance.delay.ms": "0",
        # The default 128 MiB is allocated at start-up whether or not compaction is used.
        "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        "message.max.bytes": str(MAX_MESSAGE_BYTES),
        "replica.fetch.max.bytes": str(MAX_MESSAGE_BYTES),
        "num.partitions": "1",
        # Topics are created explicitly with their configs; a typo must not create a topic.
        "auto.create.topics.enable": "false",
        "log.retention.check.interval.ms": "60000",
    }
    props.update(overrides or {})
    lines = ["# Generated by rollstream; edits are overwritten at the next start."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def render_log4j2_properties(layout: BrokerLayout) -> str:
    """A log4j2 config: INFO to a size-bounded rolling file that readiness is read from."""
    log = layout.server_log
    return "\n".join(
        [
            "status = warn",
            "appender.file.type = RollingFile",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log}",
            f"appender.file.filePattern = {log}.%i",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "appender.file.policies.type = Policies",
            "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
            "appender.file.policies.size.size = 50MB",
            "appender.file.strategy.type = DefaultRolloverStrategy",
            "appender.file.strategy.max = 3",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            # The request and state-change loggers are very chatty at INFO.
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
            "logger.state.name = state.change.logger",
            "logger.state.level = WARN",
            "",
        ]
    )


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, or a note that it does not exist."""
    with contextlib.suppress(OSError):
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])
    return f"(no log at {path})"


#: Kafka's lines when a listener cannot bind its port (Acceptor.openServerSocket): the first
#: names the endpoint, the second is the cause.
BIND_FAILURES = ("failed to bind to", "java.net.BindException")


def bind_failure(server_log: Path) -> str | None:
    """Kafka's own line saying that (and where) it could not bind a port, if the log has one."""
    lines = log_tail(server_log, lines=1000).splitlines()
    for needle in BIND_FAILURES:
        for line in lines:
            if needle in line:
                return line.strip()
    return None


def single_node_layout(data_dir: Path, settings: BrokerSettings) -> tuple[BrokerLayout, str]:
    """A single node's ports and cluster id, recorded in ``data_dir`` for its next start.

    The controller port and cluster id are the ones it was formatted with (its KRaft voter set
    names that endpoint); the broker port is ``settings.port`` if free, else another.
    """
    identity_file = data_dir / IDENTITY_FILE
    identity: dict[str, Any] = {}
    if identity_file.exists():
        identity = json.loads(identity_file.read_text())
    if identity and bool(identity.get("secure", False)) != settings.secure:
        was = "secure" if identity.get("secure") else "PLAINTEXT"
        raise BrokerError(
            f"the broker in {data_dir} was formatted {was}: start it with "
            f"ROLLSTREAM_KAFKA_SECURE={str(bool(identity.get('secure'))).lower()}, or use "
            "another ROLLSTREAM_KAFKA_DATA_DIR"
        )
    controller_port = int(identity.get("controller_port", 0))
    if controller_port:
        if not port_is_free(controller_port):
            raise BrokerError(
                f"controller port {controller_port} of the broker in {data_dir} is in "
                "use by another process; stop it or remove that data directory"
            )
    else:
        controller_port = pick_port(settings.controller_port)
    port = pick_port(settings.port, avoid=frozenset({controller_port}))
    if settings.port and port != settings.port:
        log.warning("port %d is in use; the broker listens on %d", settings.port, port)
    cluster_id = str(identity.get("cluster_id") or new_cluster_id())
    record = {"cluster_id": cluster_id, "controller_port": controller_port}
    identity_file.write_text(json.dumps(record | {"secure": settings.secure}))
    return BrokerLayout(data_dir, port, controller_port), cluster_id
