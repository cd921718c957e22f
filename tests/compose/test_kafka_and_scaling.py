"""The compose broker against the local one, the three-node override, and scaling consumers."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from rollstream.consumers.reconstruct.service import Reconstructor
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.consumers.score.service import Scorer
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.dev.broker.config import BrokerLayout, render_server_properties
from rollstream.kafka.admin import TopicsSettings
from rollstream.kafka.processor import TransactionalProcessor
from rollstream.settings import KafkaSettings
from tests.compose import checks
from tests.compose.stack import COMMAND_SETTINGS, Stack, base_doc, cluster_doc


def kafka_properties(stack: Stack, service: str) -> dict[str, str]:
    """server.properties as the apache/kafka image derives it from KAFKA_* variables."""
    props = {}
    for key, value in stack.environment(service).items():
        if key.startswith("KAFKA_"):
            name = key[6:].lower().replace("___", "\0").replace("__", "-").replace("_", ".")
            props[name.replace("\0", "_")] = value
    return props


def test_the_compose_broker_is_configured_like_the_local_one() -> None:
    local_text = render_server_properties(BrokerLayout(Path("/x"), 9092, 9093))
    local = dict(line.split("=", 1) for line in local_text.splitlines()[1:])
    placement = {
        "listeners",
        "advertised.listeners",
        "controller.quorum.bootstrap.servers",
        "log.dirs",
        "listener.security.protocol.map",
    }
    compose = kafka_properties(Stack(base_doc()), "kafka")
    assert {k: compose.get(k) for k in local if k not in placement} == {
        k: v for k, v in local.items() if k not in placement
    }
    cluster_id = Stack(base_doc()).environment("kafka")["CLUSTER_ID"]
    raw = base64.urlsafe_b64decode(cluster_id + "==")
    assert len(raw) == 16
    assert base64.urlsafe_b64encode(raw).decode().rstrip("=") == cluster_id


def test_three_kafka_nodes_replicate_every_topic() -> None:
    stack = Stack(cluster_doc())
    assert checks.all_problems(stack) == []
    brokers = [n for n in stack.services if checks.is_kafka(stack, n)]
    assert brokers == ["kafka", "kafka-2", "kafka-3"]
    props = {n: kafka_properties(stack, n) for n in brokers}
    voters = {props[n]["controller.quorum.voters"] for n in brokers}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    for name in brokers:
        node_id = props[name]["node.id"]
        assert f"{node_id}@{name}:" in props[name]["controller.quorum.voters"]
        assert checks.listeners(stack, name, "KAFKA_LISTENERS")["CONTROLLER"][1] == 9093
    assert len({stack.environment(n)["CLUSTER_ID"] for n in brokers}) == 1
    host_ports = {checks.listeners(stack, n, "KAFKA_LISTENERS")["HOST"][1] for n in brokers}
    assert len(host_ports) == 3
    for name in brokers:
        assert props[name]["offsets.topic.replication.factor"] == "3"
        assert props[name]["transaction.state.log.replication.factor"] == "3"
        assert props[name]["transaction.state.log.min.isr"] == "2"
        assert props[name]["min.insync.replicas"] == "2"
    assert stack.settings("topics", TopicsSettings).replication_factor == len(brokers)
    for name in checks.runnable(stack):
        if KafkaSettings in COMMAND_SETTINGS[stack.cli_path(name)]:
            bootstrap = stack.settings(name, KafkaSettings).bootstrap_servers
            assert bootstrap == "kafka:9092,kafka-2:9092,kafka-3:9092", name


# --- scaling consumers ----------------------------------------------------------------------------


@pytest.mark.parametrize("service", ["reconstructor", "scorer"])
def test_consumer_replicas_share_one_configuration_and_fence_by_partition(service: str) -> None:
    stack = Stack(base_doc())
    spec = stack.services[service]
    # Anything fixed per service would be shared by every replica of `--scale`.
    assert not {"container_name", "hostname", "ports"} & set(spec)
    # Nothing per replica is needed: a transactional id belongs to an input partition, so a
    # partition's new owner fences its old one, whichever replicas they are.
    kafka = stack.settings(service, KafkaSettings)
    first: TransactionalProcessor[Any]
    second: TransactionalProcessor[Any]
    if service == "reconstructor":
        settings = stack.settings(service, ReconstructSettings)
        first = Reconstructor(settings, kafka).processor
        second = Reconstructor(settings, kafka).processor
    else:
        score = stack.settings(service, ScoreSettings)
        first, second = Scorer(score, kafka).processor, Scorer(score, kafka).processor
    tp = TopicPartition(first.input_topic, 2)
    assert first.transactional_id(tp) == second.transactional_id(tp)
    assert first.transactional_id(TopicPartition(tp.topic, 3)) != first.transactional_id(tp)
