"""Replication against real brokers: three replicas on the cluster, one on a single broker.

On the three-node cluster topics get three replicas and min.insync.replicas 2; a topic made
with one replica reports the drift, and ``add_replicas`` (or ``rollstream topics replicate``)
grows it through Kafka's reassignment without losing a record. On the single broker everything
stays at one.
"""

from __future__ import annotations

import re
import time

import pytest
from aiokafka.errors import KafkaError
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.dev.broker import LocalCluster
from rollstream.errors import BrokerError
from rollstream.kafka.admin import TopicAdmin, TopicDescription
from rollstream.kafka.clients import make_producer
from rollstream.schemas import TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings
from tests.kafka_reading import read_values
from tests.waiting import until

pytestmark = pytest.mark.integration

RECORDS = 120


async def _known(admin: TopicAdmin, names: list[str]) -> None:
    """Wait until the cluster's metadata names ``names`` (created a moment ago)."""

    async def listed() -> bool:
        return set(names) <= set(await admin.list_topics())

    await until(listed, 30, f"{names} in the metadata", interval=0.2)


async def _back_in_sync(settings: KafkaSettings, topic: str) -> None:
    """Wait until a restarted node serves again: back in every ISR of ``topic``."""
    async with TopicAdmin(settings) as admin:

        async def in_sync() -> bool:
            try:
                [described] = await admin.describe([topic])
            except Exception:  # a node coming back may drop a connection meanwhile
                return False
            return {len(i) for i in described.isr.values()} == {3}

        await until(in_sync, 60, f"every replica of {topic} back in sync", interval=0.5)


async def _settled(admin: TopicAdmin, topic: str) -> TopicDescription:
    """``topic`` described once every partition has 3 replicas in sync, min.insync 2 set."""
    seen: list[TopicDescription] = []

    async def settled() -> bool:
        seen[:] = await admin.describe([topic])
        isr = {len(i) for i in seen[0].isr.values()}
        return isr == {3} and seen[0].configs.get("min.insync.replicas") == "2"

    await until(settled, 15, f"{topic} settled", interval=0.2)
    return seen[0]


async def test_topics_on_the_cluster_get_three_replicas_two_in_sync(
    cluster_settings: KafkaSettings,
) -> None:
    names = TopicNames(cluster_settings.topic_prefix)
    async with TopicAdmin(cluster_settings) as admin:
        assert await admin.brokers() == [1, 2, 3]
        reports = await admin.create(topic_specs(names, partitions=3))
        assert {(r.created, r.replication_factor, r.replicas) for r in reports} == {(True, 3, 3)}
        await _known(admin, [s.name for s in topic_specs(names)])
        for described in await admin.describe([names.events, names.state]):
            assert described.configs["min.insync.replicas"] == "2"
            assert {len(r) for r in described.replicas.values()} == {3}
        again = await admin.create(topic_specs(names, partitions=3))
        assert all(r.drift == {} and not r.needs_replicas for r in again)


async def test_add_replicas_grows_a_single_replica_topic_and_keeps_its_records(
    kafka_cluster: LocalCluster, cluster_settings: KafkaSettings
) -> None:
    topic = f"{cluster_settings.topic_prefix}.thin"
    async with TopicAdmin(cluster_settings) as admin:
        [made] = await admin.create([TopicSpec(topic, 3, {"retention.ms": "3600000"})], 1)
        assert (made.replication_factor, made.replicas) == (1, 1)
        await _known(admin, [topic])
        producer = make_producer(cluster_settings)
        await producer.start()
        try:
            for i in range(RECORDS):
                await producer.send(topic, b"%d" % i, key=b"k%d" % i)
            await producer.flush()
        finally:
            await producer.stop()

        [drifted] = await admin.create([TopicSpec(topic, 3, {"retention.ms": "3600000"})])
        assert drifted.drift == {
            "replication_factor": ("3", "1"),
            "min.insync.replicas": ("2", "1"),
        }
        assert drifted.needs_replicas

        progress: list[tuple[int, int]] = []
        [report] = await admin.add_replicas(
            [topic], timeout=120, progress=lambda done, total: progress.append((done, total))
        )
        assert progress[-1] == (3, 3)
        assert report.in_sync and report.min_insync == ("1", "2") and report.min_insync_set
        for before, target in report.reassigned.values():
            assert len(before) == 1 and len(target) == 3 and target[0] == before[0]
        # Every broker applies the new ISR and config from the metadata log on its own, and
        # each request goes to any of them: what one answered, another may show a moment later.
        described = await _settled(admin, topic)
        assert {len(r) for r in described.replicas.values()} == {3}
        # The topic keeps its other configs: AlterConfigs replaces the whole set.
        assert described.configs["retention.ms"] == "3600000"
        assert described.records == RECORDS

        async def no_drift() -> bool:
            [report] = await admin.create([TopicSpec(topic, 3, {"retention.ms": "3600000"})])
            return report.drift == {} and not report.needs_replicas

        await until(no_drift, 15, "no drift left", interval=0.2)
        [again] = await admin.add_replicas([topic])
        assert again.reassigned == {} and again.min_insync is None

    # Every record is still there with the broker that held them alone before stopped.
    first = described.leaders[0]
    kafka_cluster.stop_node(first)
    try:
        values = await read_values(cluster_settings, topic, RECORDS, timeout=60)
    finally:
        # From this thread, not a worker's: a node started by the tests dies with the thread
        # that started it (PR_SET_PDEATHSIG), and executor threads exit when idle.
        kafka_cluster.start_node(first)
        await _back_in_sync(cluster_settings, topic)
    assert sorted(values) == sorted(b"%d" % i for i in range(RECORDS))


async def test_more_replicas_than_brokers_is_refused(cluster_settings: KafkaSettings) -> None:
    topic = f"{cluster_settings.topic_prefix}.wide"
    async with TopicAdmin(cluster_settings) as admin:
        with pytest.raises(BrokerError, match="needs 4 brokers, but the cluster reports 3") as e:
            await admin.create([TopicSpec(topic, 1)], replication_factor=4)
        assert e.value.retriable is False
        assert topic not in await admin.list_topics()
        await admin.create([TopicSpec(topic, 1)])
        await _known(admin, [topic])
        with pytest.raises(BrokerError, match="needs 4 brokers"):
            await admin.add_replicas([topic], 4)


def test_the_cli_reports_drift_and_replicates(cluster_settings: KafkaSettings) -> None:
    runner = CliRunner()
    kafka = [
        "--bootstrap-servers",
        cluster_settings.bootstrap_servers,
        "--topic-prefix",
        cluster_settings.topic_prefix,
    ]
    events = f"{cluster_settings.topic_prefix}.events"

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["topics", *args, *kafka])
        assert result.exit_code == 0, result.output
        return result.output

    assert run("create", "--replication-factor", "1").count("replicas=1") == 8
    drifted = run("create")
    assert drifted.count("replication_factor is '1', rollstream wants '3'") == 8, drifted
    assert drifted.count("min.insync.replicas is '1', rollstream wants '2'") == 8, drifted
    assert "hint: `rollstream topics replicate`" in drifted

    # Without waiting: the reassignment is under way (an empty topic's may be done already).
    started = run("replicate", "events", "--no-wait")
    assert f"{events:<32} 6 partitions 1 -> 3 replicas, " in started
    # The rest, waiting for them and for the events partitions still catching up.
    replicated = run("replicate")
    assert re.search(r"\b(\d+)/\1 partitions have their new replicas in sync", replicated)
    lines = {line.split()[0]: line for line in replicated.splitlines()[-8:]}
    assert set(lines) == {s.name for s in topic_specs(TopicNames(cluster_settings.topic_prefix))}
    for name, line in lines.items():
        assert ", in sync" in line, line
        if name != events:
            assert line.endswith("min.insync.replicas 1 -> 2"), line

    # Each broker applies the new min.insync.replicas on its own: a moment may pass.
    for _ in range(50):
        settled = run("create")
        if "drift" not in settled:
            break
        time.sleep(0.2)
    assert settled.count("replicas=3") == 8 and "drift" not in settled and "hint" not in settled
    described = run("describe", "events")
    partitions = [line for line in described.splitlines() if "partition " in line]
    assert len(partitions) == 6
    for line in partitions:
        replicas = line.split("replicas [")[1].split("]")[0].split(",")
        isr = line.split("isr [")[1].split("]")[0].split(",")
        assert sorted(replicas) == sorted(isr) == ["1", "2", "3"], line

    refused = runner.invoke(cli, ["topics", "replicate", "--replication-factor", "4", *kafka])
    assert refused.exit_code == 1
    assert "needs 4 brokers, but the cluster reports 3" in refused.output


async def test_a_single_broker_keeps_one_replica_and_min_insync_one(
    kafka_settings: KafkaSettings, topic_names: TopicNames
) -> None:
    specs = topic_specs(topic_names, partitions=2)
    async with TopicAdmin(kafka_settings) as admin:
        reports = await admin.create(specs)
        assert {(r.replication_factor, r.replicas) for r in reports} == {(1, 1)}
        await _known(admin, [s.name for s in specs])
        for described in await admin.describe([s.name for s in specs]):
            assert described.configs["min.insync.replicas"] == "1"
            assert set(described.replicas.values()) == {(1,)} == set(described.isr.values())
        assert all(r.drift == {} for r in await admin.create(specs))
        replicated = await admin.add_replicas([s.name for s in specs])
        assert all(r.reassigned == {} and r.in_sync and r.min_insync is None for r in replicated)
        with pytest.raises(BrokerError, match="needs 2 brokers, but the cluster reports 1"):
            await admin.create(specs, replication_factor=2)


def test_the_cli_on_a_single_broker_has_nothing_to_replicate(kafka_settings: KafkaSettings) -> None:
    runner = CliRunner()
    kafka = [
        "--bootstrap-servers",
        kafka_settings.bootstrap_servers,
        "--topic-prefix",
        kafka_settings.topic_prefix,
    ]
    nothing = runner.invoke(cli, ["topics", "replicate", *kafka])
    assert nothing.exit_code == 1
    assert "no topics under the prefix" in nothing.output
    created = runner.invoke(cli, ["topics", "create", *kafka])
    assert created.exit_code == 0, created.output
    assert created.output.count("replicas=1") == 8 and "drift" not in created.output
    replicated = runner.invoke(cli, ["topics", "replicate", *kafka])
    assert replicated.exit_code == 0, replicated.output
    lines = replicated.output.splitlines()
    assert len(lines) == 8 and all(line.endswith("has 1+ replicas, in sync") for line in lines)


async def test_a_broker_down_neither_shrinks_the_default_nor_lowers_min_insync(
    kafka_cluster: LocalCluster, cluster_settings: KafkaSettings
) -> None:
    """The broker killed is the one an open admin client holds for its controller: a topic
    create through it is answered by a live broker (before: it waited a request timeout for
    the dead one and failed with a TimeoutError, seen on a busy machine)."""
    names = TopicNames(cluster_settings.topic_prefix)
    async with TopicAdmin(cluster_settings) as admin:
        await admin.create([TopicSpec(names.events, 3, {})])
        controller = admin._admin._client.cluster.controller
        assert controller is not None
        down = int(controller.nodeId)
        kafka_cluster.kill(down)
        try:
            # A new topic still asks for three replicas (Kafka places or refuses them), not two.
            try:
                [created] = await admin.create([TopicSpec(names.scored, 3, {})])
            except BrokerError as exc:  # refused while the broker is down: loud, not weaker
                assert "replication" in str(exc).lower(), exc
            else:
                assert created.replication_factor == 3
            alive = sorted({1, 2, 3} - {down})

            async def gone() -> bool:
                try:  # the client may still pick the node until its metadata says it is gone
                    return await admin.brokers() == alive
                except KafkaError:
                    return False

            await until(gone, 60, f"the metadata without node {down}", interval=0.5)
            # The node still holds replicas: the cluster has three brokers, one of them down.
            assert await admin.known_brokers() == [1, 2, 3]
            [report] = await admin.add_replicas([names.events], wait=False)
            assert report.replication_factor == 3 and not report.reassigned
            assert (await admin.configs([names.events]))[names.events]["min.insync.replicas"] == "2"
        finally:
            await kafka_cluster.restart_node(down)
