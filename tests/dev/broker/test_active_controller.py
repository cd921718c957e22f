"""The active controller read from the nodes' own logs, rolled ones included, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.dev.broker import BrokerInfo, BrokerSettings, LocalBroker, LocalCluster
from rollstream.settings import StatePaths


def _leader_line(node: int, epoch: int) -> str:
    # As Kafka 4.1 logs it (one line, shortened only inside the voter node's description).
    return (
        f"[2026-12-02 13:16:18,555] INFO [RaftManager id={node}] Completed transition to "
        f"Leader(localVoterNode=VoterNode(voterKey=ReplicaKey(id={node}, directoryId=x), "
        f"listeners=Endpoints(endpoints={{}})), epoch={epoch}, epochStartOffset=86, "
        "highWatermark=Optional.empty, voterStates={}) from CandidateState(epoch=3) "
        "(org.apache.kafka.raft.QuorumState)\n"
    )


def _noise(node: int) -> str:
    return (
        f"[2026-12-02 13:16:18,000] INFO [RaftManager id={node}] Completed transition to "
        "Unattached(epoch=9, voters=[1, 2, 3]) (org.apache.kafka.raft.QuorumState)\n"
    )


@pytest.fixture
def down() -> set[int]:
    """The nodes that count as not running (every other one runs)."""
    return set()


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, down: set[int]) -> LocalCluster:
    """Three nodes with empty log directories, running unless in ``down``: no process at all."""
    cluster = LocalCluster(
        BrokerSettings(data_dir=tmp_path / "kafka", port=0),
        StatePaths(state_dir=tmp_path / "state"),
        3,
        record_state=False,
    )
    for node_id in (1, 2, 3):
        (cluster.node(node_id).data_dir / "logs").mkdir(parents=True)

    def running(self: LocalBroker) -> BrokerInfo | None:
        assert self.identity is not None
        node_id = self.identity.node_id
        if node_id in down:
            return None
        return BrokerInfo(
            pid=node_id,
            bootstrap_servers="",
            port=0,
            controller_port=0,
            data_dir=str(self.data_dir),
            version="",
            cluster_id="",
            started_at=0.0,
            startup_seconds=0.0,
            node_id=node_id,
        )

    monkeypatch.setattr(LocalBroker, "running", running)
    return cluster


def _log(cluster: LocalCluster, node: int, name: str, *lines: str) -> None:
    (cluster.node(node).data_dir / "logs" / name).write_text("".join(lines))


def test_no_leader_line_anywhere_is_none(cluster: LocalCluster) -> None:
    assert cluster.active_controller() is None
    _log(cluster, 1, "server.log", _noise(1))
    _log(cluster, 2, "server.log.2026-12-02-12", _noise(2))
    assert cluster.active_controller() is None


def test_a_leader_only_in_a_rolled_log_is_found(cluster: LocalCluster) -> None:
    _log(cluster, 1, "server.log", _noise(1))
    _log(cluster, 2, "server.log.2026-12-02-12", _noise(2), _leader_line(2, 4), _noise(2))
    _log(cluster, 2, "server.log", _noise(2))
    assert cluster.active_controller() == 2


def test_a_newer_epoch_in_a_current_log_beats_an_older_one_in_a_rolled_log(
    cluster: LocalCluster, down: set[int]
) -> None:
    _log(cluster, 1, "server.log.2026-12-02-11", _leader_line(1, 2))
    _log(cluster, 1, "server.log.2026-12-02-12", _leader_line(1, 5))
    _log(cluster, 3, "server.log", _noise(3), _leader_line(3, 7))
    # Whatever order the files are read in, the highest epoch wins.
    _log(cluster, 2, "server.log.2026-12-02-13", _leader_line(2, 6))
    assert cluster.active_controller() == 3
    # The leader of the highest epoch is down: no controller known to be active.
    down.add(3)
    assert cluster.active_controller() is None


def test_the_epoch_beats_the_node_id_and_the_file_name(cluster: LocalCluster) -> None:
    _log(cluster, 3, "server.log", _leader_line(3, 9))
    _log(cluster, 1, "server.log.2026-12-02-10", _leader_line(1, 10))
    assert cluster.active_controller() == 1
