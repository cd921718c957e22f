"""Replication decisions without a broker: factor, placement of added replicas, drift."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream.errors import BrokerError, ConfigurationError
from rollstream.kafka.admin import TopicReport, TopicsSettings
from rollstream.kafka.clients import make_producer
from rollstream.kafka.reassignment import kafka_error
from rollstream.kafka.replication import (
    PartitionReplicas,
    Replication,
    choose_replicas,
    may_set_min_insync,
    plan_replicas,
    replication_drift,
    resolve_replication,
    spec_replication,
)
from rollstream.kafka.topic_configs import describe_topic_configs
from rollstream.schemas import TopicNames, TopicSpec, topic_specs
from rollstream.settings import KafkaSettings


@pytest.mark.parametrize(
    ("brokers", "wanted"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))]
)
def test_the_default_is_three_replicas_two_in_sync_or_what_the_cluster_has(
    brokers: int, wanted: tuple[int, int]
) -> None:
    assert resolve_replication(brokers) == Replication(*wanted)


def test_explicit_replication_and_its_limits() -> None:
    assert resolve_replication(3, 1) == Replication(1, 1)
    assert resolve_replication(3, 2) == Replication(2, 1)
    assert resolve_replication(3, 3, 3) == Replication(3, 3)
    with pytest.raises(BrokerError, match="replication factor 4 needs 4 brokers") as refused:
        resolve_replication(3, 4)
    assert refused.value.retriable is False
    with pytest.raises(ConfigurationError, match=r"min\.insync\.replicas 3"):
        resolve_replication(3, 2, 3)


def test_a_spec_wins_over_the_call_and_its_configs_over_its_fields() -> None:
    plain = TopicSpec("t", 1)
    assert spec_replication(plain, 3, None, None) == Replication(3, 2)
    assert spec_replication(plain, 3, 1, None) == Replication(1, 1)
    assert spec_replication(TopicSpec("t", 1, replication_factor=2), 3, 1, None) == Replication(
        2, 1
    )
    assert spec_replication(
        TopicSpec("t", 1, {"min.insync.replicas": "3"}, min_insync_replicas=1), 3, None, None
    ) == Replication(3, 3)
    with pytest.raises(ConfigurationError, match="must be a number"):
        spec_replication(TopicSpec("t", 1, {"min.insync.replicas": "two"}), 3, None, None)


def test_topic_specs_carry_the_replication_asked_for() -> None:
    names = TopicNames("p")
    assert {(s.replication_factor, s.min_insync_replicas) for s in topic_specs(names)} == {
        (None, None)
    }
    specs = topic_specs(names, replication_factor=3, min_insync_replicas=2)
    assert {(s.replication_factor, s.min_insync_replicas) for s in specs} == {(3, 2)}


def test_settings_leave_replication_to_the_cluster() -> None:
    settings = TopicsSettings()
    assert settings.replication_factor is None
    assert settings.min_insync_replicas is None


def test_the_leader_stays_first_and_the_least_loaded_brokers_are_added() -> None:
    load = {1: 5, 2: 1, 3: 0, 4: 1}
    # The leader (3) is not the first replica (after a failover): it becomes the first.
    assert choose_replicas([2, 3], 3, 4, [1, 2, 3, 4], load) == [3, 2, 4, 1]
    assert load == {1: 6, 2: 1, 3: 0, 4: 2}
    assert choose_replicas([1, 2, 3], 1, 2, [1, 2, 3], {}) == [1, 2, 3]  # never removes
    with pytest.raises(BrokerError, match="3 replicas need 3 brokers") as error:
        choose_replicas([1], 1, 3, [1, 2], {})
    assert error.value.retriable is False


def test_single_replica_partitions_spread_evenly_grow_evenly() -> None:
    partitions = [PartitionReplicas("t", p, p % 3 + 1, (p % 3 + 1,)) for p in range(6)]
    plan = plan_replicas(partitions, 3, [1, 2, 3])
    assert plan == {
        ("t", 0): [1, 2, 3],
        ("t", 1): [2, 1, 3],
        ("t", 2): [3, 1, 2],
        ("t", 3): [1, 2, 3],
        ("t", 4): [2, 1, 3],
        ("t", 5): [3, 1, 2],
    }
    assert plan_replicas(partitions, 1, [1, 2, 3]) == {}


@st.composite
def layouts(
    draw: st.DrawFn,
) -> tuple[list[int], int, list[PartitionReplicas], dict[int, int] | None]:
    """Brokers, a wanted factor, partitions with some replicas each, maybe other topics' load."""
    brokers = draw(st.lists(st.integers(1, 9), min_size=1, max_size=6, unique=True))
    wanted = draw(st.integers(1, len(brokers)))
    partitions = []
    for index in range(draw(st.integers(0, 12))):
        replicas = draw(st.lists(st.sampled_from(brokers), max_size=len(brokers), unique=True))
        led = bool(replicas) and draw(st.booleans())
        leader = draw(st.sampled_from(replicas)) if led else -1
        partitions.append(PartitionReplicas(f"t{index % 3}", index, leader, tuple(replicas)))
    others = draw(st.none() | st.dictionaries(st.sampled_from(brokers), st.integers(0, 4)))
    return brokers, wanted, partitions, others


@given(layouts())
def test_plans_keep_replicas_add_only_known_brokers_and_stay_balanced(
    layout: tuple[list[int], int, list[PartitionReplicas], dict[int, int] | None],
) -> None:
    brokers, wanted, partitions, others = layout
    load = None
    if others is not None:
        load = {b: others.get(b, 0) for b in brokers}
        for p in partitions:
            for r in p.replicas:
                load[r] += 1
    plan = plan_replicas(partitions, wanted, brokers, load)
    final = dict(load) if load is not None else {b: 0 for b in brokers}
    if load is None:
        for p in partitions:
            for r in p.replicas:
                final[r] += 1
    last_extra: dict[int, tuple[str, int]] = {}
    for p in sorted(partitions, key=lambda p: (p.topic, p.partition)):
        key = (p.topic, p.partition)
        if len(p.replicas) >= wanted:
            assert key not in plan
            continue
        target = plan[key]
        assert len(target) == wanted
        assert len(set(target)) == wanted
        assert set(target) <= set(brokers)
        kept = target[: len(p.replicas)]
        assert set(kept) == set(p.replicas)
        if p.leader in p.replicas:
            assert target[0] == p.leader
        for broker in target[len(p.replicas) :]:
            final[broker] += 1
            last_extra[broker] = key
    # Balanced within 1: a broker that got a replica was among the least loaded of those that
    # could take it, so it ends at most one above any broker that could have taken its last.
    for broker, key in last_extra.items():
        for other in set(brokers) - set(plan[key]):
            assert final[broker] <= final[other] + 1
    if others is None and all(not p.replicas for p in partitions):
        assert max(final.values()) - min(final.values()) <= 1


def test_drift_reports_replica_counts_and_the_min_insync_in_force() -> None:
    want = Replication(3, 2)
    assert replication_drift([3, 3], want, "2") == {}
    assert replication_drift([1, 1], want, "2") == {"replication_factor": ("3", "1")}
    assert replication_drift([1, 3, 2], want, "1") == {
        "replication_factor": ("3", "1..3"),
        "min.insync.replicas": ("2", "1"),
    }
    assert replication_drift([], want, None) == {"min.insync.replicas": ("2", None)}
    report = TopicReport("t", False, 1, replication_drift([1], want, "2"), 3, 1)
    assert report.needs_replicas
    assert not TopicReport("t", False, 1, {}, 3, 3).needs_replicas


def test_min_insync_is_raised_only_once_enough_replicas_are_in_sync() -> None:
    want = Replication(3, 2)
    lagging = [PartitionReplicas("t", 0, 1, (1, 2, 3), (1,))]
    caught_up = [PartitionReplicas("t", 0, 1, (1, 2, 3), (1, 3))]
    assert not may_set_min_insync(want, "1", lagging)
    assert may_set_min_insync(want, "1", caught_up)
    assert may_set_min_insync(want, "3", lagging)  # lowering never refuses a write


def test_broker_errors_carry_the_kafka_error_name() -> None:
    error = kafka_error(39, "no such broker 9", "reassigning t-0")
    assert str(error) == "reassigning t-0 failed: INVALID_REPLICATION_ASSIGNMENT: no such broker 9"
    assert error.retriable is False
    assert "NO_REASSIGNMENT_IN_PROGRESS" in str(kafka_error(85, None, "cancelling"))
    assert kafka_error(7, None, "waiting").retriable is True  # REQUEST_TIMED_OUT


async def test_every_producer_keeps_acks_all_and_idempotence() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    kinds: list[dict[str, Any]] = [{}, {"transactional_id": "t-1"}, {"linger_ms": 0, "acks": -1}]
    for overrides in kinds:
        producer = make_producer(settings, **overrides)
        try:
            assert producer._sender._acks == -1  # "all"
            assert producer._txn_manager is not None  # idempotent
        finally:
            await producer.stop()  # never started: closes its client without connecting
    weakenings: list[dict[str, Any]] = [{"acks": 1}, {"enable_idempotence": False}]
    for weakening in weakenings:
        with pytest.raises(ConfigurationError, match="refusing"):
            make_producer(settings, **weakening)


class _FlakyConfigs:
    """An admin client whose broker learns of the topic only after ``unknown_for`` answers."""

    def __init__(self, unknown_for: int) -> None:
        self.unknown_for = unknown_for
        self.calls = 0

    async def describe_configs(self, resources: list[Any]) -> list[Any]:
        self.calls += 1
        (resource,) = resources
        answer: tuple[Any, ...]
        if self.calls <= self.unknown_for:
            answer = (3, "This server does not host this topic-partition.", 2, resource.name, [])
        else:
            entry: tuple[Any, ...] = ("min.insync.replicas", "2", False, 1, False, [])
            answer = (0, None, 2, resource.name, [entry])
        return [type("Response", (), {"resources": [answer]})()]


async def test_configs_of_a_topic_created_a_moment_ago_are_asked_again() -> None:
    admin = _FlakyConfigs(unknown_for=2)
    configs = await describe_topic_configs(admin, ["t"])
    assert configs == {"t": {"min.insync.replicas": ("2", 1)}} and admin.calls == 3
    with pytest.raises(BrokerError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        await describe_topic_configs(_FlakyConfigs(10**6), ["t"], patience=0.3)
