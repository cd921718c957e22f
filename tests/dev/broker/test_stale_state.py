"""Records of brokers that died: status, start and stop after a kill or a machine's restart.

A kill is a SIGKILL (no shutdown runs); a machine's restart is the records of processes that
are gone, or whose pids now belong to other programs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rollstream.cli import cli
from rollstream.dev.broker import BrokerSettings, LocalBroker, LocalCluster
from rollstream.dev.broker.records import is_kafka_process
from rollstream.errors import MissingToolError
from rollstream.settings import StatePaths
from tests.conftest import JAR_CACHE


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StatePaths:
    """The state directory the ``rollstream kafka`` commands of the test use too."""
    state = tmp_path / "state"
    monkeypatch.setenv("ROLLSTREAM_STATE_DIR", str(state))
    monkeypatch.setenv("ROLLSTREAM_KAFKA_PORT", "0")
    monkeypatch.setenv("ROLLSTREAM_LOG_LEVEL", "WARNING")
    return StatePaths(state_dir=state, cache_dir=JAR_CACHE)


def _settings() -> BrokerSettings:
    return BrokerSettings(port=0, heap="384m", start_timeout=120)


def _kafka(*args: str) -> Result:
    return CliRunner().invoke(cli, ["kafka", *args])


@pytest.fixture
def impostor(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is no broker, whose command line names the broker's config file.

    What a reused pid may be after a restart: any program, even one reading that file.
    """
    props = tmp_path / "state" / "kafka" / "server.properties"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(props)])
    yield proc
    proc.kill()
    proc.wait()


def test_only_kafka_on_its_own_config_counts_as_the_broker(
    tmp_path: Path, impostor: subprocess.Popen[bytes]
) -> None:
    props = tmp_path / "state" / "kafka" / "server.properties"
    assert not is_kafka_process(impostor.pid, props)
    assert not is_kafka_process(os.getpid(), props)
    assert not is_kafka_process(0, props) and not is_kafka_process(-1, props)


def _slow_to_die(seconds: float) -> subprocess.Popen[bytes]:
    """A child of ours that takes ``seconds`` to exit: a killed JVM whose threads still exit."""
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def test_stop_waits_for_a_killed_child_however_short_its_shutdown_timeout(
    paths: StatePaths,
) -> None:
    broker = LocalBroker(_settings(), paths, outlive_parent=False)
    dying = _slow_to_die(1.0)
    broker._proc = dying
    # Not a running broker (no record), so nothing is signalled: only the wait is asked for.
    assert broker.stop(0.1) is False
    # Reaped before stop returned: the ports it held are free for the next start.
    assert dying.returncode == 0


def test_a_new_launch_reaps_the_previous_child_before_it_starts(paths: StatePaths) -> None:
    settings = BrokerSettings(port=0, heap="384m", java="no-such-java-here")
    broker = LocalBroker(settings, paths, outlive_parent=False)
    dying = _slow_to_die(1.0)
    broker._proc = dying
    with pytest.raises(MissingToolError, match="no-such-java-here"):
        broker.launch()
    assert dying.returncode == 0


@pytest.mark.integration
def test_a_killed_broker_is_reported_stopped_and_its_record_removed(
    paths: StatePaths, impostor: subprocess.Popen[bytes]
) -> None:
    broker = LocalBroker(_settings(), paths, outlive_parent=False)
    info = broker.start()
    state = paths.broker_state_file
    record = state.read_text()
    broker.kill_launched()  # SIGKILL: no shutdown runs, the records stay

    status = _kafka("status")
    assert (status.exit_code, status.output) == (1, "not running\n")
    assert not state.exists()

    # `stop` of a broker that died cleans up quietly.
    state.write_text(record)
    stopped = _kafka("stop")
    assert (stopped.exit_code, stopped.output) == (0, "not running\n")
    assert not state.exists()

    # After a restart the pid may be another program's: never taken for the broker, nor stopped.
    reused = replace(info, pid=impostor.pid)
    state.write_text(reused.to_json())
    status = _kafka("status", "--json")
    assert status.exit_code == 1
    assert json.loads(status.output) == {"running": False, "healthy": False, "nodes": []}
    assert not state.exists()
    state.write_text(reused.to_json())
    assert (_kafka("stop").output, state.exists()) == ("not running\n", False)
    broker.info = reused  # what the process that started the broker still holds
    assert not broker.stop()
    assert impostor.poll() is None  # never signalled

    # `start` is not refused by the stale record: it starts the broker again, on its data.
    state.write_text(replace(info, pid=impostor.pid).to_json())
    again = LocalBroker(_settings(), paths, outlive_parent=False)
    restarted = again.start()
    try:
        assert restarted.pid not in (info.pid, impostor.pid)
        assert restarted.cluster_id == info.cluster_id
        status = _kafka("status")
        assert status.exit_code == 0 and f"running: pid {restarted.pid}," in status.output
    finally:
        assert again.stop()
    assert not state.exists() and impostor.poll() is None


@pytest.mark.integration
def test_a_cluster_shows_its_nodes_as_they_run_and_forgets_dead_ones(paths: StatePaths) -> None:
    # One node: the records and the status are those of any cluster, at a third of the start.
    cluster = LocalCluster(_settings(), paths, 1, outlive_parent=False)
    first = cluster.start().nodes[0].pid
    node_file = cluster.node(1).data_dir / "node.json"
    state = paths.broker_state_file
    try:
        cluster.kill(1)
        # Restarted under another pid, which the cluster's record (of the first) does not name.
        second = cluster.start_node(1).pid
        assert second != first
        seen = LocalCluster(_settings(), paths, 1).running()
        assert seen is not None and [n.pid for n in seen.nodes] == [second]
        status = _kafka("status", "--json")
        assert status.exit_code == 0, status.output
        assert [n["pid"] for n in json.loads(status.output)["nodes"]] == [second]
        records = node_file.read_text(), state.read_text()
    finally:
        stopped = _kafka("stop")
    assert (stopped.exit_code, stopped.output) == (0, "stopped\n")
    assert not node_file.exists() and not state.exists()
    cluster.node(1).kill_launched()  # reaps it: its parent is this process

    # As a machine's restart leaves them: records of nodes that no longer run.
    node_file.write_text(records[0])
    state.write_text(records[1])
    status = _kafka("status")
    assert status.exit_code == 1
    assert status.output == "not running: 0 of 1 nodes alive [] (node 1 stopped)\n"
    assert not node_file.exists() and not state.exists()
    status = _kafka("status", "--json")
    assert json.loads(status.output) == {
        "running": False,
        "healthy": False,
        "nodes": [{"node_id": 1, "pid": None}],
    }

    node_file.write_text(records[0])
    state.write_text(records[1])
    stopped = _kafka("stop")
    assert (stopped.exit_code, stopped.output) == (0, "not running\n")
    assert not node_file.exists() and not state.exists()
