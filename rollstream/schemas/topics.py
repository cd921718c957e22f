"""Topic names, what each carries, and the configuration each is created with."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from rollstream.errors import RecordTooLargeError

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# What one record (key and value) may weigh, uncompressed: aiokafka refuses a record above the
# producer's max_request_size (MAX_MESSAGE_BYTES) before compressing it, so the budget is
# counted uncompressed, with room left for headers and the batch's framing. Every writer checks
# it before sending (``check_record_size``): a record over it would fail in the producer, or
# worse, abort a transaction or block a partition behind it.
RECORD_BUDGET_BYTES = MAX_MESSAGE_BYTES - 64 * 1024
_MINUTE_MS = 60 * 1000
_DAY_MS = 24 * 60 * _MINUTE_MS


class Topic(StrEnum):
    """The logical topics; the full name is ``<prefix>.<value>``."""

    EVENTS = "events"
    TRAJECTORIES = "trajectories"
    SCORED = "scored"
    TASKS = "tasks"
    CONTROL = "control"
    DEADLETTERS = "deadletters"
    SCHEMAS = "schemas"
    STATE = "state"


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: full name, partitions, configs, and what it holds.

    ``replication_factor`` and ``min_insync_replicas`` left None are decided when the topic is
    created, from what the cluster offers (see ``rollstream.kafka.replication``).
    """

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    description: str = ""
    replication_factor: int | None = None
    min_insync_replicas: int | None = None


@dataclass(frozen=True)
class TopicNames:
    """Full topic names under one prefix (tests use a unique prefix each)."""

    prefix: str = "rollstream"

    def __getitem__(self, topic: Topic) -> str:
        return f"{self.prefix}.{topic.value}"

    @property
    def events(self) -> str:
        """Calls and session lifecycle, keyed by session id."""
        return self[Topic.EVENTS]

    @property
    def trajectories(self) -> str:
        """Reconstructed trajectories, keyed by group id."""
        return self[Topic.TRAJECTORIES]

    @property
    def scored(self) -> str:
        """Scored trajectories, keyed by group id."""
        return self[Topic.SCORED]

    @property
    def tasks(self) -> str:
        """Tasks for the rollout nodes, keyed by task id."""
        return self[Topic.TASKS]

    @property
    def control(self) -> str:
        """Control events (policy versions), keyed by kind; compacted."""
        return self[Topic.CONTROL]

    @property
    def deadletters(self) -> str:
        """Records consumers gave up on."""
        return self[Topic.DEADLETTERS]

    @property
    def schemas(self) -> str:
        """The schema store: every writer schema, keyed by fingerprint; compacted."""
        return self[Topic.SCHEMAS]

    @property
    def state(self) -> str:
        """Consumers' own state (what each reconstructor partition already emitted); compacted."""
        return self[Topic.STATE]

    def resolve(self, name: str) -> str:
        """Full name of a logical name, a replay output (``trajectories.NAME``) or a full name."""
        head = name.split(".", 1)[0]
        if head in {t.value for t in Topic}:
            return f"{self.prefix}.{name}"
        return name

    def logical(self, full_name: str) -> Topic | None:
        """The logical topic a full name stands for, if it is one of ours."""
        for topic in Topic:
            if self[topic] == full_name:
                return topic
        return None


def topic_specs(
    names: TopicNames,
    partitions: int = 6,
    retention_days: float = 30.0,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
) -> list[TopicSpec]:
    """Every rollstream topic with its configuration.

    ``partitions`` applies to the keyed data topics (events, trajectories, scored, tasks): it
    bounds how many consumers of one group work in parallel. ``retention_days`` applies to the
    events topic, which is also the replay source; derived topics keep half as long.
    ``replication_factor`` and ``min_insync_replicas`` apply to every topic (None: decided from
    the cluster when the topics are created).
    """
    base = {
        "compression.type": "zstd",
        "max.message.bytes": str(MAX_MESSAGE_BYTES),
    }
    retention = str(int(retention_days * _DAY_MS))
    derived_retention = str(int(retention_days * _DAY_MS / 2))
    compacted = base | {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
    # The state topic takes a few records per transaction of every input partition: the active
    # segment (never compacted) rolls after 10 min or 16 MiB rather than 7 days or 1 GiB, and
    # tombstones go 10 min after compaction, so an assignment, which reads it whole, reads
    # about one record per live entry plus minutes of writes (bench: state).
    state = compacted | {
        "segment.ms": str(10 * _MINUTE_MS),
        "segment.bytes": str(16 * 1024 * 1024),
        "delete.retention.ms": str(10 * _MINUTE_MS),
        "max.compaction.lag.ms": str(60 * _MINUTE_MS),
    }
    specs = [
        TopicSpec(
            names.events,
            partitions,
            base | {"retention.ms": retention},
            "calls and session lifecycle; key = session id; the replay source",
        ),
        TopicSpec(
            names.trajectories,
            partitions,
            base | {"retention.ms": derived_retention},
            "reconstructed trajectories; key = group id",
        ),
        TopicSpec(
            names.scored,
            partitions,
            base | {"retention.ms": derived_retention},
            "scored trajectories; key = group id",
        ),
        TopicSpec(
            names.tasks,
            partitions,
            base | {"retention.ms": str(7 * _DAY_MS)},
            "tasks for the rollout nodes; key = task id",
        ),
        TopicSpec(
            names.control, 1, compacted, "policy versions trainers publish; key = kind; compacted"
        ),
        TopicSpec(
            names.deadletters,
            1,
            base | {"retention.ms": retention},
            "records consumers gave up on, with the reason",
        ),
        TopicSpec(names.schemas, 1, compacted, "writer schemas; key = fingerprint; compacted"),
        TopicSpec(
            names.state,
            1,
            state,
            "consumer state written in their transactions; key = group/topic/partition; compacted",
        ),
    ]
    return [
        replace(s, replication_factor=replication_factor, min_insync_replicas=min_insync_replicas)
        for s in specs
    ]


def record_size(key: bytes | None, value: bytes | None) -> int:
    """A record's weight against ``RECORD_BUDGET_BYTES``: its key and value, uncompressed."""
    return len(key or b"") + len(value or b"")


def check_record_size(
    key: bytes | None, value: bytes | None, what: str, budget: int = RECORD_BUDGET_BYTES
) -> None:
    """Raise ``RecordTooLargeError`` (not retriable) when a record would not fit one message."""
    size = record_size(key, value)
    if size > budget:
        raise RecordTooLargeError(what, size, budget)
