"""The state files of local brokers, and whether the process a file names is still that broker.

``rollstream kafka start`` records each broker (``broker.json``) and each node of a cluster
(``node.json`` in the node's directory) for the commands run later in other processes. A record
outlives its process: a node killed, or a machine restarted, leaves files naming pids that are
gone or, after a restart, belong to other programs. A record counts only while its pid runs
Kafka on that broker's own configuration file; one that does not is stale and is removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from rollstream.host import process_args

log = logging.getLogger(__name__)

#: The main class of a Kafka broker's JVM.
KAFKA_MAIN_CLASS = "kafka.Kafka"


@dataclass(frozen=True)
class BrokerInfo:
    """A running broker, as recorded in the state file."""

    pid: int
    bootstrap_servers: str
    port: int
    controller_port: int
    data_dir: str
    version: str
    cluster_id: str
    started_at: float
    startup_seconds: float
    node_id: int = 1

    def to_json(self) -> str:
        """Serialize for the state file."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> BrokerInfo:
        """Parse a state file written by :meth:`to_json`."""
        return cls(**json.loads(text))

    def runs(self) -> bool:
        """Whether this broker's process still runs (see :func:`is_kafka_process`)."""
        return is_kafka_process(self.pid, Path(self.data_dir) / "server.properties")


def is_kafka_process(pid: int, server_properties: Path) -> bool:
    """Whether ``pid`` is alive (not a zombie) and is Kafka started with ``server_properties``.

    A live pid alone proves nothing, pids are reused; nor does a command line that merely names
    the file (an editor, ``tail``): it must run Kafka's main class with that file as argument.
    """
    args = process_args(pid)
    return (
        args is not None
        and os.fsencode(KAFKA_MAIN_CLASS) in args
        and os.fsencode(server_properties) in args
    )


def read_record(path: Path) -> str | None:
    """The text of the state file at ``path``; None if there is none (or it cannot be read)."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def forget_stale(path: Path, text: str, why: str) -> None:
    """Remove the state file at ``path``, which holds ``text``, a record found to be stale.

    Only if it still holds ``text``: a start in another process may have just written a live
    record over it.
    """
    if read_record(path) != text:
        return
    with contextlib.suppress(OSError):
        path.unlink()
    log.info("removed the stale record %s: %s", path, why)


def local_broker_pids(state_file: Path, bootstrap_servers: str) -> tuple[int, ...]:
    """The processes of the broker or cluster `rollstream kafka start` runs at these servers.

    ``state_file`` is the broker's state file; empty for any other broker (whose CPU a
    benchmark then does not measure).
    """
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return ()
    if not isinstance(state, dict) or state.get("bootstrap_servers") != bootstrap_servers:
        return ()
    nodes = state.get("nodes") or [state]  # a cluster's state lists its nodes
    try:
        infos = [BrokerInfo(**node) for node in nodes]
    except TypeError:
        return ()
    # A record outlives its process, and pids are reused: not whatever runs under one now.
    return tuple(info.pid for info in infos if info.runs())
