"""Shared fixtures: one real Kafka broker for the session, unique topics and clients per test.

Tests that need replication ask for ``kafka_cluster``: three KRaft nodes, started once when the
first such test runs. A test that stops or kills a node starts it again before it ends.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from hypothesis import settings as hypothesis_settings

from rollstream.dev.broker import BrokerInfo, BrokerSettings, LocalBroker, LocalCluster
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import make_consumer, make_producer
from rollstream.schemas import TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings, StatePaths

# Plugins of the suite's own (registered in pytest_configure): the waits for the set-up's
# builds, the time by test group.
from tests import group_times, prebuilt_wait
from tests.docker_fixtures import (  # noqa: F401
    docker_base,
    docker_busybox,
    docker_engine,
    own_engine,
)
from tests.engine_servers import engine_servers  # noqa: F401
from tests.fault_table import chaos_report  # noqa: F401

# The tables the tests fill (fault table, fidelity, ablation), whole under pytest-xdist too.
from tests.run_tables import pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401

# The jar cache is shared with the user's (downloads once); everything else is per test run.
# Properties are checked for what they assert, never for how long an example takes: on a shared
# machine (two busy loops beside the suite) hypothesis's 200 ms deadline failed examples that
# passed when replayed. Speed lives in the benchmarks.
hypothesis_settings.register_profile("rollstream", deadline=None)
hypothesis_settings.load_profile("rollstream")

JAR_CACHE = StatePaths().cache_dir


def pytest_configure(config: pytest.Config) -> None:
    """The waits for the set-up's builds and the time by group, as plugins of their own."""
    config.pluginmanager.register(prebuilt_wait, "rollstream-prebuilt")
    config.pluginmanager.register(group_times, "rollstream-group-times")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's ROLLSTREAM_* variables or their broker's state file."""
    import os

    for key in list(os.environ):
        if key.startswith("ROLLSTREAM_") and key != "ROLLSTREAM_PYTHON":
            monkeypatch.delenv(key)
    monkeypatch.setenv("ROLLSTREAM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ROLLSTREAM_CACHE_DIR", str(JAR_CACHE))


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """One real Kafka broker (KRaft) for the whole test run, on free ports."""
    settings = BrokerSettings(
        port=0, data_dir=tmp_path_factory.mktemp("kafka"), heap="768m", start_timeout=120
    )
    broker = LocalBroker(
        settings, StatePaths(cache_dir=JAR_CACHE), record_state=False, outlive_parent=False
    )
    info = broker.start()
    yield info
    broker.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real three-node Kafka cluster (KRaft, each node broker and controller) on free ports."""
    settings = BrokerSettings(
        port=0, data_dir=tmp_path_factory.mktemp("cluster"), heap="512m", start_timeout=180
    )
    cluster = LocalCluster(
        settings, StatePaths(cache_dir=JAR_CACHE), 3, record_state=False, outlive_parent=False
    )
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_settings(kafka_cluster: LocalCluster) -> KafkaSettings:
    """Settings reaching the session cluster through all its nodes, with a unique topic prefix."""
    for node_id in range(1, kafka_cluster.size + 1):
        # A test before this one may have failed with a node down; start it again.
        if kafka_cluster.pid(node_id) is None:
            kafka_cluster.start_node(node_id)
    return KafkaSettings(
        bootstrap_servers=kafka_cluster.bootstrap_servers,
        topic_prefix=f"test-{uuid.uuid4().hex[:10]}",
    )


@pytest.fixture
def kafka_settings(kafka_broker: BrokerInfo) -> KafkaSettings:
    """Settings reaching the session broker, with a topic prefix unique to this test."""
    return KafkaSettings(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        topic_prefix=f"test-{uuid.uuid4().hex[:10]}",
    )


@pytest.fixture
def topic_names(kafka_settings: KafkaSettings) -> TopicNames:
    """This test's topic names."""
    return TopicNames(kafka_settings.topic_prefix)


TopicFactory = Callable[..., Awaitable[str]]
ProducerFactory = Callable[..., Awaitable[AIOKafkaProducer]]
ConsumerFactory = Callable[..., Awaitable[AIOKafkaConsumer]]


@pytest.fixture
async def topic_factory(kafka_settings: KafkaSettings) -> AsyncIterator[TopicFactory]:
    """Create a topic with a unique name: ``await topic_factory(partitions=3, configs={...})``."""
    async with TopicAdmin(kafka_settings) as admin:

        async def create(
            partitions: int = 1, configs: dict[str, str] | None = None, name: str | None = None
        ) -> str:
            name = name or f"{kafka_settings.topic_prefix}.{uuid.uuid4().hex[:8]}"
            await admin.create([TopicSpec(name, partitions, configs or {})])
            return name

        yield create


@pytest.fixture
async def rollstream_topics(kafka_settings: KafkaSettings, topic_names: TopicNames) -> TopicNames:
    """Every rollstream topic, created under this test's prefix."""
    async with TopicAdmin(kafka_settings) as admin:
        await admin.create(topic_specs(topic_names, partitions=3))
    return topic_names


@pytest.fixture
async def producer_factory(
    kafka_settings: KafkaSettings,
) -> AsyncIterator[ProducerFactory]:
    """Started producers built like rollstream's, stopped after the test."""
    producers: list[AIOKafkaProducer] = []

    async def create(**overrides: Any) -> AIOKafkaProducer:
        producer = make_producer(kafka_settings, **overrides)
        await producer.start()
        producers.append(producer)
        return producer

    yield create
    for producer in producers:
        await producer.stop()


@pytest.fixture
async def consumer_factory(
    kafka_settings: KafkaSettings,
) -> AsyncIterator[ConsumerFactory]:
    """Started consumers (read_committed, manual commits) with a unique group by default."""
    consumers: list[AIOKafkaConsumer] = []

    async def create(*topics: str, **overrides: Any) -> AIOKafkaConsumer:
        overrides.setdefault("group_id", f"group-{uuid.uuid4().hex[:8]}")
        consumer = make_consumer(kafka_settings, *topics, **overrides)
        await consumer.start()
        consumers.append(consumer)
        return consumer

    yield create
    for consumer in consumers:
        await consumer.stop()


# tryfirst: pytest-xdist reads the groups in its own hook of this name, which a worker registers
# after this file (so, without it, runs first): groups added later would be ignored and a group's
# tests spread over the workers (two Docker daemons, two clusters, faults at once).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that use a broker or the Docker daemon, group them; the cluster's go last.

    Three idle KRaft nodes still cost about a third of a core (heartbeats, replica fetches), so
    the cluster starts only after every other test has run. Tests that need a set-up build go
    after the rest of their group, the engine's by family.
    """
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if {"kafka_broker", "kafka_cluster"} & fixtures:
            item.add_marker(pytest.mark.integration)
        if "docker_engine" in fixtures:
            item.add_marker(pytest.mark.docker)
            item.add_marker(pytest.mark.integration)
        if "docker_base" in fixtures:
            item.add_marker(pytest.mark.prebuilt("base-root"))  # the set-up's debootstrap
        if "engine_servers" in fixtures:  # a real vLLM: see tests/engine_servers.py
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.prebuilt("engine"))
            item.add_marker(pytest.mark.timeout(300, func_only=True))
        # Under pytest-xdist (``--dist loadgroup``) one worker runs all of a group in turn: a
        # run starts one cluster and one Docker daemon, not one per worker, and no two faults
        # of the reliability suite run at once.
        if "kafka_cluster" in fixtures:
            item.add_marker(pytest.mark.xdist_group("cluster"))
        elif "docker_engine" in fixtures:
            item.add_marker(pytest.mark.xdist_group("docker"))
        elif item.get_closest_marker("chaos") is not None:
            item.add_marker(pytest.mark.xdist_group("chaos"))
        elif "engine_servers" in fixtures:
            item.add_marker(pytest.mark.xdist_group("engine"))
    # Within its group, a test that needs one of the set-up's builds runs after the others: the
    # build goes on in the background meanwhile (a group runs in collection order).
    # The engine's tests by family: each family's vLLM server starts once (tests/engine_servers).
    items.sort(
        key=lambda item: (
            "kafka_cluster" in getattr(item, "fixturenames", ()),
            item.get_closest_marker("prebuilt") is not None,
            _engine_family(item),
        )
    )


def _engine_family(item: pytest.Item) -> str:
    """The family whose vLLM server a test uses ("" for a test without one)."""
    if "engine_servers" not in getattr(item, "fixturenames", ()):
        return ""
    callspec = getattr(item, "callspec", None)
    family = callspec.params.get("family") if callspec is not None else None
    if not isinstance(family, str):
        # Unsorted, such a test split a family's tests and cost a server start (3 min loaded).
        raise pytest.UsageError(
            f"{item.nodeid} uses engine_servers: name its family as a 'family' parameter "
            "(@pytest.mark.parametrize), so that the engine group runs family by family"
        )
    return family


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a grouped test that ``--dist loadgroup`` would not keep on its group's worker.

    pytest-xdist carries a test's group in its node id; a pytest or xdist release that stops
    that (pytest-dev/pytest-xdist#1386) spreads the groups silently: two Docker daemons, two
    clusters and faults at once, slower and flaky, and nothing would say why.
    """
    grouped = item.get_closest_marker("xdist_group") is not None
    if grouped and getattr(item.config.option, "loadgroup", False) and "@" not in item.nodeid:
        pytest.fail(
            "pytest-xdist did not apply this test's xdist_group: this pytest and pytest-xdist "
            "do not group together (see the pin in pyproject.toml)",
            pytrace=False,
        )
