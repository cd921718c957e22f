"""A local Kafka cluster: several KRaft nodes (each broker and controller) on 127.0.0.1.

``rollstream kafka start --nodes 3`` and the tests' cluster fixture run one. Every node is a
:class:`LocalBroker` in its own data directory with its own ports; the cluster picks those once,
keeps them in ``cluster.json`` (a restarted node must come back where its voters expect it) and
names every node in the static voter set. Faults for the reliability suite act on one node:
:meth:`LocalCluster.kill` and :meth:`LocalCluster.start_node`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import signal
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Self

from rollstream.dev.broker.config import BrokerLayout, NodeIdentity, new_cluster_id, pick_port
from rollstream.dev.broker.probe import _run_sync
from rollstream.dev.broker.process import LocalBroker
from rollstream.dev.broker.records import BrokerInfo, forget_stale, read_record
from rollstream.dev.broker.settings import BrokerSettings
from rollstream.errors import BrokerError
from rollstream.host import HOST
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

_CLUSTER_FILE = "cluster.json"
# The raft layer logs each transition of a node's quorum state; the leader is the voter that
# last became leader in the highest epoch.
_LEADER_LINE = re.compile(
    r"\[RaftManager id=(\d+)\] Completed transition to Leader\(.*?, epoch=(\d+),"
)


@dataclass(frozen=True)
class ClusterInfo:
    """A running local cluster, as recorded in the state file."""

    bootstrap_servers: str
    cluster_id: str
    version: str
    data_dir: str
    nodes: list[BrokerInfo]
    startup_seconds: float

    def to_json(self) -> str:
        """Serialize for the state file (``bootstrap_servers`` first, as a broker's is)."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ClusterInfo:
        """Parse a state file written by :meth:`to_json`."""
        raw = json.loads(text)
        raw["nodes"] = [BrokerInfo(**node) for node in raw["nodes"]]
        return cls(**raw)


class LocalCluster:
    """``nodes`` combined broker+controller Kafka nodes forming one KRaft quorum.

    ``start()`` launches every node, then waits until each is ready and the cluster's metadata
    names them all; a failure stops every node it launched. ``stop()`` stops them all at once.
    With ``record_state`` the cluster is written to the state
    file other rollstream commands discover the bootstrap servers from.
    """

    def __init__(
        self,
        settings: BrokerSettings,
        paths: StatePaths,
        nodes: int = 3,
        *,
        record_state: bool = True,
        overrides: dict[str, str] | None = None,
        outlive_parent: bool = True,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.settings = settings
        self.paths = paths
        self.size = nodes
        self.data_dir = (settings.data_dir or paths.state_dir / "kafka").resolve()
        self.record_state = record_state
        self.overrides = overrides or {}
        self.outlive_parent = outlive_parent
        self.info: ClusterInfo | None = None
        self._nodes: dict[int, LocalBroker] = {}
        # Nodes tied to their parent die when the *thread* that started them ends (that is how
        # PR_SET_PDEATHSIG works), so async restarts use one thread that lives with the cluster.
        self._launcher: concurrent.futures.ThreadPoolExecutor | None = None

    # -- the whole cluster -----------------------------------------------------------------

    def start(self) -> ClusterInfo:
        """Start every node that is not running; return when the whole cluster answers."""
        began = time.monotonic()
        nodes = self._brokers()
        launched: dict[int, tuple[BrokerLayout, str, float]] = {}
        infos: dict[int, BrokerInfo] = {}
        try:
            for node_id, broker in nodes.items():
                if broker.running() is None:
                    launched[node_id] = broker.launch()
            for node_id, broker in nodes.items():
                if node_id in launched:
                    infos[node_id] = broker.wait_ready(*launched[node_id])
                else:
                    infos[node_id] = broker.running() or broker.start()
            self._wait_members(began)
        except BaseException:
            # Launched nodes not yet ready have no state file that stop() would find.
            for node_id in launched:
                nodes[node_id].kill_launched()
            self.stop(timeout=10.0)
            raise
        self.info = ClusterInfo(
            bootstrap_servers=self.bootstrap_servers,
            cluster_id=self._identities()[1].cluster_id,
            version=self.settings.version,
            data_dir=str(self.data_dir),
            nodes=[infos[n] for n in sorted(infos)],
            startup_seconds=round(time.monotonic() - began, 3),
        )
        if self.record_state:
            state = self.paths.broker_state_file
            state.parent.mkdir(parents=True, exist_ok=True)
            state.write_text(self.info.to_json())
        log.info("Kafka cluster of %d nodes ready at %s", self.size, self.bootstrap_servers)
        return self.info

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every node; returns whether any was running.

        All at once: stopped one at a time, the last nodes would wait for a quorum that has
        already gone before their controlled shutdown could finish.
        """
        running = {n: b.running() for n, b in self._brokers().items()}
        pids = {n: info.pid for n, info in running.items() if info is not None}
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node_id, pid in pids.items():
            broker = self.node(node_id)
            if not broker.wait_exit(pid, max(0.1, deadline - time.monotonic())):
                log.warning("node %d ignored SIGTERM for %.0fs, killing it", node_id, timeout)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                broker.wait_exit(pid, 10.0)
            broker.forget()
        if self.record_state:
            self.paths.broker_state_file.unlink(missing_ok=True)
        self.info = None
        if self._launcher is not None:
            self._launcher.shutdown(wait=False)
            self._launcher = None
        return bool(pids)

    def running(self) -> ClusterInfo | None:
        """The recorded cluster if every one of its nodes is alive, else None.

        Its nodes as they run now: a node restarted since the cluster was recorded has another
        pid. Stale records are removed: each dead node's, and the cluster's once none is alive.
        """
        if not (self.data_dir / _CLUSTER_FILE).exists():
            return None
        nodes = [broker.running() for broker in self._brokers().values()]
        live = [info for info in nodes if info is not None]
        recorded, text = self._recorded()
        if not live and recorded is not None and self.record_state:
            forget_stale(self.paths.broker_state_file, text, "no node of the cluster runs")
        recorded = self.info or recorded
        if recorded is None or len(live) < len(nodes):
            return None
        return replace(recorded, nodes=live)

    def healthy(self, timeout: float = 5.0) -> bool:
        """Whether every node runs and the metadata names all of them."""
        if self.running() is None:
            return False
        return _run_sync(self._members(timeout)) == set(self._brokers())

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma-separated."""
        return ",".join(f"{HOST}:{i.port}" for i in self._identities().values())

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- one node (faults) -----------------------------------------------------------------

    def node(self, node_id: int) -> LocalBroker:
        """The broker process of node ``node_id``."""
        return self._brokers()[node_id]

    def pid(self, node_id: int) -> int | None:
        """The process id of node ``node_id`` if it runs."""
        info = self.node(node_id).running()
        return info.pid if info else None

    def kill(self, node_id: int, signum: signal.Signals = signal.SIGKILL) -> None:
        """Send ``signum`` to node ``node_id`` (SIGKILL: a crash) and wait for it to exit."""
        broker = self.node(node_id)
        info = broker.running()
        if info is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signum)
        if not broker.wait_exit(info.pid, 60.0):
            raise BrokerError(f"node {node_id} (pid {info.pid}) did not exit after {signum.name}")
        broker.info = None

    def stop_node(self, node_id: int, timeout: float = 30.0) -> bool:
        """Stop node ``node_id`` cleanly (controlled shutdown); whether it was running."""
        return self.node(node_id).stop(timeout)

    def start_node(self, node_id: int) -> BrokerInfo:
        """Start node ``node_id`` again on its ports; return when it answers."""
        return self.node(node_id).start()

    async def restart_node(self, node_id: int) -> BrokerInfo:
        """:meth:`start_node` without blocking the event loop."""
        if self._launcher is None:
            self._launcher = concurrent.futures.ThreadPoolExecutor(1, "kafka-cluster")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._launcher, self.start_node, node_id)

    def active_controller(self) -> int | None:
        """The node that leads the KRaft quorum now, read from the nodes' own logs."""
        best: tuple[int, int] | None = None  # (epoch, node)
        for broker in self._brokers().values():
            # The rolled files too: the leader's line may have rolled out of server.log.
            for log_file in sorted((broker.data_dir / "logs").glob("server.log*")):
                text = ""
                with contextlib.suppress(OSError):
                    text = log_file.read_text(errors="replace")
                for match in _LEADER_LINE.finditer(text):
                    candidate = (int(match.group(2)), int(match.group(1)))
                    if best is None or candidate > best:
                        best = candidate
        if best is None or self.node(best[1]).running() is None:
            return None
        return best[1]

    # -- internals -------------------------------------------------------------------------

    def _recorded(self) -> tuple[ClusterInfo | None, str]:
        """The cluster as the state file records it (None: it does not), and the file's text."""
        text = read_record(self.paths.broker_state_file) or ""
        try:
            info = ClusterInfo.from_json(text)
        except (ValueError, TypeError, KeyError):
            return None, text  # not a cluster's record (a single broker's), or none at all
        # Another cluster's record is none of this one's.
        return (info if Path(info.data_dir) == self.data_dir else None), text

    def _identities(self) -> dict[int, NodeIdentity]:
        """The nodes' ids and ports: read from ``cluster.json``, or picked and written once."""
        path = self.data_dir / _CLUSTER_FILE
        if path.exists():
            raw = json.loads(path.read_text())
            if len(raw["nodes"]) != self.size:
                raise BrokerError(
                    f"the cluster in {self.data_dir} has {len(raw['nodes'])} nodes, not "
                    f"{self.size}; stop it and remove that directory to change its size"
                )
            return {n["node_id"]: NodeIdentity(**n) for n in raw["nodes"]}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        taken: set[int] = set()
        picks: list[tuple[int, int]] = []
        for index in range(self.size):
            preferred = self.settings.port + index if self.settings.port else 0
            port = pick_port(preferred, avoid=frozenset(taken))
            taken.add(port)
            controller = pick_port(0, avoid=frozenset(taken))
            taken.add(controller)
            picks.append((port, controller))
        voters = ",".join(f"{i + 1}@{HOST}:{c}" for i, (_, c) in enumerate(picks))
        cluster_id = new_cluster_id()
        identities = {
            i + 1: NodeIdentity(i + 1, port, controller, cluster_id, voters, self.size)
            for i, (port, controller) in enumerate(picks)
        }
        path.write_text(json.dumps({"nodes": [asdict(n) for n in identities.values()]}, indent=2))
        return identities

    def _brokers(self) -> dict[int, LocalBroker]:
        if not self._nodes:
            for node_id, identity in self._identities().items():
                self._nodes[node_id] = LocalBroker(
                    self.settings,
                    self.paths,
                    record_state=False,
                    overrides=self.overrides,
                    outlive_parent=self.outlive_parent,
                    identity=identity,
                    data_dir=self.data_dir / f"node-{node_id}",
                )
        return self._nodes

    async def _members(self, timeout: float) -> set[int]:
        from aiokafka.client import AIOKafkaClient

        client = AIOKafkaClient(
            bootstrap_servers=self.bootstrap_servers, request_timeout_ms=int(timeout * 1000)
        )
        try:
            await asyncio.wait_for(client.bootstrap(), timeout)
            return {broker.nodeId for broker in client.cluster.brokers()}
        except Exception:  # any failure means "not (yet) all there"
            return set()
        finally:
            await client.close()

    def _wait_members(self, began: float) -> None:
        deadline = began + self.settings.start_timeout
        wanted = set(self._brokers())
        while time.monotonic() < deadline:
            if _run_sync(self._members(2.0)) == wanted:
                return
            time.sleep(0.2)
        raise BrokerError(
            f"the cluster's metadata did not name all {self.size} nodes after "
            f"{self.settings.start_timeout:.0f}s"
        )


def cluster_size(paths: StatePaths, settings: BrokerSettings) -> int | None:
    """How many nodes the cluster in the configured data directory has, if one is there."""
    data_dir = (settings.data_dir or paths.state_dir / "kafka").resolve()
    with contextlib.suppress(OSError, ValueError, KeyError):
        return len(json.loads((data_dir / _CLUSTER_FILE).read_text())["nodes"])
    return None


def local_kafka(
    settings: BrokerSettings,
    paths: StatePaths,
    *,
    record_state: bool = True,
    outlive_parent: bool = True,
    topic_prefix: str = "rollstream",
) -> LocalBroker | LocalCluster:
    """The local Kafka of this data directory: a single broker or a cluster.

    A cluster already formatted there wins (``rollstream kafka start`` after a stop brings the
    cluster back); otherwise ``settings.nodes`` decides. Asking for a cluster where a single
    broker keeps its data is refused: its topics would be lost to the new cluster.
    """
    existing = cluster_size(paths, settings)
    nodes = existing or settings.nodes
    if settings.secure and nodes > 1:
        raise BrokerError("--secure runs one broker; a secure cluster is not made locally yet")
    if existing is not None:
        return LocalCluster(
            settings, paths, nodes, record_state=record_state, outlive_parent=outlive_parent
        )
    if settings.nodes > 1:
        data_dir = (settings.data_dir or paths.state_dir / "kafka").resolve()
        if (data_dir / "server.properties").exists():
            raise BrokerError(
                f"{data_dir} holds a single broker's data; stop it and choose another "
                "ROLLSTREAM_KAFKA_DATA_DIR (or remove that one) to start a cluster"
            )
        return LocalCluster(
            settings, paths, nodes, record_state=record_state, outlive_parent=outlive_parent
        )
    return LocalBroker(
        settings,
        paths,
        record_state=record_state,
        outlive_parent=outlive_parent,
        topic_prefix=topic_prefix,
    )
