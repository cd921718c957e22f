"""Replication of rollstream's topics: how many replicas, where added ones go, what drifted.

Pure functions over the cluster's metadata; :class:`rollstream.kafka.admin.TopicAdmin` asks
the cluster and applies what they decide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rollstream.errors import BrokerError, ConfigurationError
from rollstream.schemas.topics import TopicSpec

#: Replicas a topic gets when nothing says otherwise and the cluster has the brokers for them.
DEFAULT_REPLICATION_FACTOR = 3
MIN_INSYNC = "min.insync.replicas"


@dataclass(frozen=True)
class Replication:
    """A topic's replication factor and ``min.insync.replicas``."""

    replication_factor: int
    min_insync_replicas: int


def default_min_insync(replication_factor: int) -> int:
    """All replicas but one must acknowledge an ``acks=all`` write (at least one).

    One broker may then be down, for a restart or a crash, without refusing writes, and with
    three replicas no acknowledged write lives on a single disk.
    """
    return replication_factor - 1 if replication_factor >= 2 else 1


def resolve_replication(
    brokers: int, replication_factor: int | None = None, min_insync_replicas: int | None = None
) -> Replication:
    """The replication for a cluster of ``brokers``; None means "the default for it".

    Raises ``BrokerError`` (not retriable) when more replicas are asked for than the cluster has
    brokers, and ``ConfigurationError`` when ``min_insync_replicas`` exceeds the factor (no
    ``acks=all`` write could ever succeed).
    """
    if replication_factor is None:
        factor = min(DEFAULT_REPLICATION_FACTOR, max(1, brokers))
    elif replication_factor < 1:
        raise ConfigurationError(f"replication factor {replication_factor}: at least 1")
    else:
        factor = replication_factor
    if factor > brokers:
        raise BrokerError(
            f"replication factor {factor} needs {factor} brokers, but the cluster reports "
            f"{brokers}; ask for at most {brokers} replicas (ROLLSTREAM_TOPICS_REPLICATION_FACTOR)",
            retriable=False,
        )
    min_insync = default_min_insync(factor) if min_insync_replicas is None else min_insync_replicas
    if not 1 <= min_insync <= factor:
        raise ConfigurationError(
            f"min.insync.replicas {min_insync} must be between 1 and the replication factor "
            f"{factor}: above it no acks=all write could succeed"
        )
    return Replication(factor, min_insync)


@dataclass(frozen=True)
class PartitionReplicas:
    """One partition's replicas and in-sync replicas, as the metadata reports them."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...] = ()


def choose_replicas(
    current: Sequence[int], leader: int, wanted: int, brokers: Iterable[int], load: dict[int, int]
) -> list[int]:
    """``wanted`` replicas: the current ones (leader first), then the least loaded others.

    The leader stays first so that it stays the preferred leader: the reassignment moves no
    leadership and clients keep writing to the same broker. ``load`` (replicas per broker)
    decides among the others, ties by broker id, and is updated with the choice so that one
    plan spreads its new replicas. Never removes a replica: a partition with ``wanted`` or more
    comes back as it is (leader first).
    """
    kept = [leader] if leader in current else []
    kept += [r for r in dict.fromkeys(current) if r != leader]
    candidates = sorted(
        (b for b in set(brokers) if b not in kept), key=lambda b: (load.get(b, 0), b)
    )
    missing = wanted - len(kept)
    if missing > len(candidates):
        raise BrokerError(
            f"{wanted} replicas need {wanted} brokers, but only {len(kept) + len(candidates)} "
            "are known",
            retriable=False,
        )
    extras = candidates[: max(0, missing)]
    for broker in extras:
        load[broker] = load.get(broker, 0) + 1
    return kept + extras


def plan_replicas(
    partitions: Iterable[PartitionReplicas],
    wanted: int,
    brokers: Iterable[int],
    load: Mapping[int, int] | None = None,
) -> dict[tuple[str, int], list[int]]:
    """Target replica lists of the partitions with fewer than ``wanted`` replicas.

    ``load`` is how many replicas each broker holds already (all topics' partitions; default:
    those of ``partitions``). Partitions go in (topic, partition) order, so a plan is
    reproducible.
    """
    parts = sorted(partitions, key=lambda p: (p.topic, p.partition))
    counts = dict(load) if load is not None else _load(parts)
    known = sorted(set(brokers))
    return {
        (p.topic, p.partition): choose_replicas(p.replicas, p.leader, wanted, known, counts)
        for p in parts
        if len(p.replicas) < wanted
    }


def _load(partitions: Iterable[PartitionReplicas]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for p in partitions:
        for r in p.replicas:
            counts[r] = counts.get(r, 0) + 1
    return counts


def replication_drift(
    replica_counts: Iterable[int], wanted: Replication, min_insync: str | None
) -> dict[str, tuple[str, str | None]]:
    """How an existing topic's replication differs from ``wanted``, as ``{key: (want, actual)}``.

    ``replication_factor`` when any partition has another replica count (the actual value is
    ``"1"``, or ``"1..3"`` when partitions differ); ``min.insync.replicas`` when the value in
    force (the topic's own or the broker default) differs.
    """
    counts = sorted(set(replica_counts))
    drift: dict[str, tuple[str, str | None]] = {}
    if counts and counts != [wanted.replication_factor]:
        actual = str(counts[0]) if len(counts) == 1 else f"{counts[0]}..{counts[-1]}"
        drift["replication_factor"] = (str(wanted.replication_factor), actual)
    if min_insync != str(wanted.min_insync_replicas):
        drift[MIN_INSYNC] = (str(wanted.min_insync_replicas), min_insync)
    return drift


def spec_replication(
    spec: TopicSpec, brokers: int, replication_factor: int | None, min_insync: int | None
) -> Replication:
    """The replication ``create`` gives a spec: its own, else the call's, else the default."""
    if MIN_INSYNC in spec.configs:
        try:
            min_insync = int(spec.configs[MIN_INSYNC])
        except ValueError as exc:
            raise ConfigurationError(f"{spec.name}: {MIN_INSYNC} must be a number") from exc
    elif spec.min_insync_replicas is not None:
        min_insync = spec.min_insync_replicas
    factor = spec.replication_factor if spec.replication_factor is not None else replication_factor
    return resolve_replication(brokers, factor, min_insync)


def may_set_min_insync(
    want: Replication, before: str | None, partitions: Iterable[PartitionReplicas]
) -> bool:
    """Whether the topic can take ``want``'s min.insync.replicas without refusing writes now.

    Lowering it never refuses a write. Raising it would refuse ``acks=all`` writes to any
    partition whose ISR is smaller, so that waits for every partition to be fully replicated.
    """
    if before is not None and before.isdigit() and int(before) > want.min_insync_replicas:
        return True
    return all(
        len(p.replicas) >= want.replication_factor and len(p.isr) >= want.min_insync_replicas
        for p in partitions
    )


@dataclass(frozen=True)
class ReassignmentReport:
    """What ``TopicAdmin.add_replicas`` did to one topic.

    ``reassigned`` maps each partition that got replicas to (before, target); ``replicas`` and
    ``isr`` are every partition's as last seen. ``min_insync`` is (in force before, wanted)
    when they differed, and ``min_insync_set`` whether the topic has the wanted value now: it
    is raised only once enough replicas are in sync, since before that a higher value would
    refuse ``acks=all`` writes.
    """

    topic: str
    replication_factor: int
    reassigned: dict[int, tuple[tuple[int, ...], tuple[int, ...]]]
    replicas: dict[int, tuple[int, ...]]
    isr: dict[int, tuple[int, ...]]
    min_insync: tuple[str | None, str] | None = None
    min_insync_set: bool = False

    @property
    def in_sync(self) -> bool:
        """Whether every partition has the wanted replicas, all of them in sync."""
        return all(
            len(replicas) >= self.replication_factor and set(self.isr.get(p, ())) >= set(replicas)
            for p, replicas in self.replicas.items()
        )
