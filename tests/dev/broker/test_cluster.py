"""The local Kafka cluster: three KRaft nodes, faults on one node, the CLI's --nodes."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient

from rollstream.dev.broker import BrokerSettings, LocalBroker, LocalCluster, local_kafka
from rollstream.dev.broker.config import (
    BrokerLayout,
    NodeIdentity,
    render_server_properties,
    replication_for,
)
from rollstream.errors import BrokerError
from rollstream.kafka.clients import make_consumer, make_producer
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")


def test_replication_follows_the_cluster_size() -> None:
    assert replication_for(1) == (1, 1)
    assert replication_for(2) == (2, 1)
    assert replication_for(3) == (3, 2)
    assert replication_for(5) == (3, 2)


def test_a_node_names_every_voter_and_replicates_internal_topics(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    identity = NodeIdentity(2, 9002, 9102, "abc", voters, 3)
    props = _properties(render_server_properties(BrokerLayout(tmp_path, 9002, 9102, identity)))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == voters
    assert "controller.quorum.bootstrap.servers" not in props
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["min.insync.replicas"] == "2"
    single = _properties(render_server_properties(BrokerLayout(tmp_path, 9002, 9102)))
    assert single["node.id"] == "1"
    assert single["min.insync.replicas"] == "1"
    assert "controller.quorum.voters" not in single


def test_a_cluster_is_refused_over_a_single_brokers_data(tmp_path: Path) -> None:
    data = tmp_path / "kafka"
    data.mkdir()
    (data / "server.properties").write_text("node.id=1\n")
    paths = StatePaths(state_dir=tmp_path, cache_dir=JAR_CACHE)
    with pytest.raises(BrokerError, match="single broker"):
        local_kafka(BrokerSettings(data_dir=data, nodes=3), paths)
    assert isinstance(local_kafka(BrokerSettings(data_dir=data), paths), LocalBroker)


async def _brokers(bootstrap: str) -> set[int]:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    try:
        await client.bootstrap()
        return {b.nodeId for b in client.cluster.brokers()}
    finally:
        await client.close()


@pytest.mark.integration
async def test_the_cluster_has_three_brokers(kafka_cluster: LocalCluster) -> None:
    assert await _brokers(kafka_cluster.bootstrap_servers) == {1, 2, 3}
    assert kafka_cluster.healthy()
    assert kafka_cluster.active_controller() in {1, 2, 3}


async def _wait_for(predicate: object, timeout: float = 60.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.2)


@pytest.mark.integration
async def test_killing_the_active_controller_elects_another_and_writes_go_on(
    kafka_cluster: LocalCluster, cluster_settings: KafkaSettings
) -> None:

    topic = f"{cluster_settings.topic_prefix}.kill"
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster_settings.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, 1, 3, topic_configs={"min.insync.replicas": "2"})]
        )
    finally:
        await admin.close()
    controller = kafka_cluster.active_controller()
    assert controller is not None
    producer = make_producer(cluster_settings)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"before")
        kafka_cluster.kill(controller)
        await _wait_for(lambda: kafka_cluster.active_controller() not in {None, controller})
        # acks=all with two of three replicas in sync is still a successful write.
        await asyncio.wait_for(producer.send_and_wait(topic, b"after"), 60)
    finally:
        await producer.stop()
        kafka_cluster.start_node(controller)
    consumer = make_consumer(cluster_settings, auto_offset_reset="earliest")
    consumer.subscribe([topic])
    await consumer.start()
    try:
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 2 and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            values += [r.value for records in batch.values() for r in records if r.value]
    finally:
        await consumer.stop()
    assert values == [b"before", b"after"]
    assert await _brokers(kafka_cluster.bootstrap_servers) == {1, 2, 3}


@pytest.mark.integration
def test_the_cli_starts_reports_and_stops_a_cluster(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLSTREAM_")} | {
        "ROLLSTREAM_STATE_DIR": str(tmp_path / "state"),
        "ROLLSTREAM_CACHE_DIR": str(JAR_CACHE),
        "ROLLSTREAM_KAFKA_PORT": "0",
        "ROLLSTREAM_KAFKA_HEAP": "384m",
    }
    rollstream = [sys.executable, "-m", "rollstream", "kafka"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*rollstream, *args], env=env, capture_output=True, text=True, timeout=240
        )

    started = run("start", "--nodes", "3")
    try:
        assert started.returncode == 0, started.stderr
        assert "a cluster of 3 nodes" in started.stdout
        status = run("status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        record = json.loads(status.stdout)
        assert record["healthy"] is True
        assert [n["node_id"] for n in record["nodes"]] == [1, 2, 3]
        assert len(record["bootstrap_servers"].split(",")) == 3
        # Other commands find all three nodes without any setting.
        state = json.loads((tmp_path / "state" / "kafka" / "broker.json").read_text())
        assert state["bootstrap_servers"] == record["bootstrap_servers"]
        # Starting again (without --nodes) finds the running cluster.
        again = run("start")
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    for node in record["nodes"]:
        assert not Path(f"/proc/{node['pid']}").exists() or _zombie(node["pid"])
    after = run("status")
    assert after.returncode == 1 and "0 of 3 nodes alive" in after.stdout


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.integration
def test_a_failed_start_leaves_no_node_running(tmp_path: Path) -> None:
    cluster = LocalCluster(
        BrokerSettings(data_dir=tmp_path / "kafka", port=0, heap="384m", start_timeout=120),
        StatePaths(state_dir=tmp_path / "state", cache_dir=JAR_CACHE),
        3,
        record_state=False,
        outlive_parent=False,
    )
    taken = json.loads(_identity_file(cluster).read_text())["nodes"][0]["port"]
    with socket.socket() as blocker:
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        with pytest.raises(BrokerError):
            cluster.start()
    # Node 1 fails while nodes 2 and 3 are launched but not yet waited for: none may live on.
    for node_id in (1, 2, 3):
        proc = cluster.node(node_id)._proc
        assert proc is None or proc.poll() is not None, f"node {node_id} still runs"


def _identity_file(cluster: LocalCluster) -> Path:
    cluster._identities()  # picks and records the ports, as start() would
    return cluster.data_dir / "cluster.json"
