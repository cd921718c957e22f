"""Topic names and configurations."""

from __future__ import annotations

from rollstream.schemas import Topic, TopicNames, topic_specs
from rollstream.schemas.topics import MAX_MESSAGE_BYTES


def test_names_follow_the_prefix() -> None:
    names = TopicNames("lab")
    assert names.events == "lab.events"
    assert names[Topic.SCORED] == "lab.scored"
    assert names.resolve("trajectories") == "lab.trajectories"
    assert names.resolve("other.topic") == "other.topic"
    assert names.logical("lab.tasks") is Topic.TASKS
    assert names.logical("rollstream.tasks") is None


def test_every_topic_has_a_spec_with_zstd_and_16mib_records() -> None:
    specs = topic_specs(TopicNames(), partitions=4, retention_days=2)
    assert {s.name for s in specs} == {TopicNames()[t] for t in Topic}
    for spec in specs:
        assert spec.configs["compression.type"] == "zstd"
        assert spec.configs["max.message.bytes"] == str(MAX_MESSAGE_BYTES)
        assert spec.description


def test_sizes_and_retention() -> None:
    specs = {s.name: s for s in topic_specs(TopicNames(), partitions=4, retention_days=2)}
    names = TopicNames()
    assert specs[names.events].partitions == 4
    assert specs[names.events].configs["retention.ms"] == str(2 * 86_400_000)
    assert specs[names.trajectories].configs["retention.ms"] == str(86_400_000)
    # Ordered, compacted, small topics.
    for name in (names.control, names.schemas, names.state):
        assert specs[name].partitions == 1
        assert specs[name].configs["cleanup.policy"] == "compact"
    # The state topic's active segment rolls (and is compacted) within minutes, not 7 days.
    assert int(specs[names.state].configs["segment.ms"]) <= 3_600_000


def test_resolve_logical_replay_and_full_names() -> None:
    names = TopicNames("rs")
    assert names.resolve("events") == "rs.events"
    assert names.resolve("trajectories.ablation1") == "rs.trajectories.ablation1"
    assert names.resolve("other.events") == "other.events"  # a full name stays as it is
