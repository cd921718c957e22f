"""Topic management: create rollstream's topics idempotently, list, describe, replicate them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.kafka.clients import make_admin, make_consumer
from rollstream.kafka.reassignment import (
    Progress,
    alter_reassignments,
    cluster_topics,
    kafka_error,
    partitions_of,
    wait_reassigned,
)
from rollstream.kafka.replication import (
    MIN_INSYNC,
    ReassignmentReport,
    may_set_min_insync,
    plan_replicas,
    replication_drift,
    resolve_replication,
    spec_replication,
)
from rollstream.kafka.topic_configs import describe_topic_configs, set_topic_config, topic_level
from rollstream.schemas.topics import TopicSpec
from rollstream.settings import KafkaSettings

_TOPIC_ALREADY_EXISTS = 36


class TopicsSettings(BaseSettings):
    """How ``rollstream topics create`` sizes the topics (``ROLLSTREAM_TOPICS_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_TOPICS_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    partitions: int = Field(
        default=6, ge=1, description="Partitions of events, trajectories, scored and tasks."
    )
    replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="Replicas of every topic. Default: 3, or as many as the cluster has brokers "
        "if fewer",
    )
    min_insync_replicas: int | None = Field(
        default=None,
        ge=1,
        description="Replicas that must have an acks=all write before it succeeds. Default: the "
        "replication factor minus 1 (at least 1)",
    )
    retention_days: float = Field(
        default=30.0, gt=0, description="Retention of the events topic (the replay source)."
    )


@dataclass(frozen=True)
class TopicReport:
    """What ``create_topics`` did with one topic.

    ``drift`` lists configs of an existing topic that differ from the spec, as
    ``{name: (wanted, actual)}``, with ``partitions``, ``replication_factor`` and
    ``min.insync.replicas`` (see ``replication_drift``); rollstream never rewrites an existing
    topic's configs here (``TopicAdmin.add_replicas`` adds missing replicas).
    ``replication_factor`` is the one wanted, ``replicas`` the fewest any partition has.
    """

    name: str
    created: bool
    partitions: int
    drift: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    replication_factor: int = 1
    replicas: int = 1

    @property
    def needs_replicas(self) -> bool:
        """Whether ``add_replicas`` would change this topic (replicas or min.insync.replicas)."""
        return self.replicas < self.replication_factor or MIN_INSYNC in self.drift


@dataclass(frozen=True)
class TopicDescription:
    """A topic's partitions, non-default configs, and the records it holds per partition."""

    name: str
    partitions: int
    leaders: dict[int, int]
    configs: dict[str, str]
    offsets: dict[int, tuple[int, int]]  # partition -> (beginning, end)
    replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    isr: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def records(self) -> int:
        """Upper bound of the records held (end - beginning; transaction markers count too)."""
        return sum(end - begin for begin, end in self.offsets.values())


class TopicAdmin:
    """An admin client for our topics, with ``start()``/``stop()`` and ``async with``."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._admin: AIOKafkaAdminClient = make_admin(settings)

    async def start(self) -> None:
        """Connect to the cluster."""
        await self._admin.start()

    async def stop(self) -> None:
        """Close the connection."""
        await self._admin.close()

    async def __aenter__(self) -> TopicAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def create(
        self,
        specs: list[TopicSpec],
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
    ) -> list[TopicReport]:
        """Create the topics that do not exist; report drift on those that do.

        A spec's own replication settings win over the arguments; None left after both means
        the cluster's default (``resolve_replication``). Every created topic gets its
        ``min.insync.replicas`` as a topic config.
        """
        brokers = len(await self.known_brokers())
        wanted = {
            s.name: spec_replication(s, brokers, replication_factor, min_insync_replicas)
            for s in specs
        }
        configs_of = {
            s.name: s.configs | {MIN_INSYNC: str(wanted[s.name].min_insync_replicas)} for s in specs
        }
        response = await self._admin.create_topics(
            [
                NewTopic(
                    s.name,
                    s.partitions,
                    wanted[s.name].replication_factor,
                    topic_configs=configs_of[s.name],
                )
                for s in specs
            ]
        )
        existing: set[str] = set()
        for topic, code, message in response.topic_errors:
            if code == _TOPIC_ALREADY_EXISTS:
                existing.add(topic)
            elif code != 0:
                raise kafka_error(code, message, f"creating topic {topic!r}")
        reports = []
        configs = await describe_topic_configs(
            self._admin, [s.name for s in specs if s.name in existing]
        )
        metadata = (
            {t["topic"]: t for t in await cluster_topics(self._admin, sorted(existing), only=True)}
            if existing
            else {}
        )
        for spec in specs:
            want = wanted[spec.name]
            if spec.name not in existing:
                reports.append(
                    TopicReport(
                        spec.name,
                        True,
                        spec.partitions,
                        replication_factor=want.replication_factor,
                        replicas=want.replication_factor,
                    )
                )
                continue
            entries = configs.get(spec.name, {})
            own = topic_level(entries)
            drift = {
                key: (value, own.get(key))
                for key, value in spec.configs.items()
                if key != MIN_INSYNC and own.get(key) != value
            }
            partitions = metadata[spec.name]["partitions"]
            if len(partitions) != spec.partitions:
                drift["partitions"] = (str(spec.partitions), str(len(partitions)))
            counts = [len(p["replicas"]) for p in partitions]
            # min.insync.replicas against the value in force: topics made before rollstream
            # set it run on the broker default, which may well be the wanted one.
            in_force = entries.get(MIN_INSYNC, (None, 0))[0]
            drift |= replication_drift(counts, want, in_force)
            reports.append(
                TopicReport(
                    spec.name,
                    False,
                    len(partitions),
                    drift,
                    want.replication_factor,
                    min(counts, default=0),
                )
            )
        return reports

    async def brokers(self) -> list[int]:
        """The ids of the brokers the cluster's metadata names (those up), sorted."""
        cluster = await self._admin.describe_cluster()
        return sorted(b["node_id"] for b in cluster["brokers"])

    async def known_brokers(self) -> list[int]:
        """The brokers up and those holding any replica (a broker down is still one), sorted.

        The default replication is decided from these: counted from the brokers up, one broker
        down would make new topics less replicated for good (and ``replicate`` lower their
        ``min.insync.replicas``).
        """
        live = set(await self.brokers())
        metadata = await self._admin.describe_topics()
        holding = {r for t in metadata for p in t["partitions"] for r in p["replicas"]}
        return sorted(live | holding)

    async def list_topics(self) -> list[str]:
        """Every topic name in the cluster, internal ones excluded, sorted."""
        return sorted(t for t in await self._admin.list_topics() if not t.startswith("__"))

    async def delete(self, names: Iterable[str]) -> list[str]:
        """Delete those of ``names`` that exist; the ones deleted, sorted."""
        existing = sorted(set(names) & set(await self.list_topics()))
        if existing:
            await self._admin.delete_topics(existing)
        return existing

    async def configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        """Each topic's configs that are set on the topic (not broker defaults)."""
        described = await describe_topic_configs(self._admin, names)
        return {name: topic_level(entries) for name, entries in described.items()}

    async def describe(self, names: list[str]) -> list[TopicDescription]:
        """Partitions, leaders, replicas and ISR, topic-level configs and offsets of ``names``."""
        metadata = await cluster_topics(self._admin, names, only=True)
        configs = await self.configs(names)
        consumer = make_consumer(self.settings)
        await consumer.start()
        try:
            descriptions = []
            for topic in metadata:
                parts = [
                    TopicPartition(topic["topic"], p["partition"]) for p in topic["partitions"]
                ]
                begin = await consumer.beginning_offsets(parts)
                end = await consumer.end_offsets(parts)
                descriptions.append(
                    TopicDescription(
                        name=topic["topic"],
                        partitions=len(parts),
                        leaders={p["partition"]: p["leader"] for p in topic["partitions"]},
                        configs=configs.get(topic["topic"], {}),
                        offsets={tp.partition: (begin[tp], end[tp]) for tp in parts},
                        replicas={
                            p["partition"]: tuple(p["replicas"]) for p in topic["partitions"]
                        },
                        isr={p["partition"]: tuple(p["isr"]) for p in topic["partitions"]},
                    )
                )
        finally:
            await consumer.stop()
        return sorted(descriptions, key=lambda d: d.name)

    async def add_replicas(
        self,
        names: list[str],
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
        *,
        wait: bool = True,
        timeout: float = 600.0,
        progress: Progress | None = None,
    ) -> list[ReassignmentReport]:
        """Grow every partition of ``names`` to ``replication_factor`` replicas; one report each.

        Kafka's own reassignment copies the data to the added replicas (the current ones and
        the leader stay; see ``choose_replicas``). With ``wait``, polls until they are all in
        sync or ``timeout`` seconds passed, calling ``progress(done, total)``. Then sets
        ``min.insync.replicas`` where it differs from the wanted value, if enough replicas are
        in sync to take ``acks=all`` writes under it; otherwise a later call does. Never
        removes replicas. None settings are the cluster's defaults, as in ``create``.
        """
        brokers = await self.brokers()
        known = await self.known_brokers()
        want = resolve_replication(len(known), replication_factor, min_insync_replicas)
        metadata = await cluster_topics(self._admin, names)
        states = partitions_of(metadata)
        # Every topic's replicas weigh on a broker, not only those of the topics replicated.
        load = Counter(r for p in states.values() for r in p.replicas)
        ours = [p for p in states.values() if p.topic in set(names)]
        targets = plan_replicas(ours, want.replication_factor, brokers, load)
        await alter_reassignments(self._admin, targets)
        # Also wait for partitions still catching up (an earlier run that did not wait).
        # (Not those waiting on a broker that is down: they cannot catch up before it is back.)
        lagging = {
            (p.topic, p.partition): list(p.replicas)
            for p in ours
            if not set(p.isr) >= set(p.replicas) and set(p.replicas) - set(p.isr) <= set(brokers)
        }
        if (targets or lagging) and wait:
            awaited = lagging | targets
            states |= await wait_reassigned(self._admin, awaited, timeout, progress)
        elif targets:
            states |= partitions_of(await self._admin.describe_topics(sorted(set(names))))
        configs = await describe_topic_configs(self._admin, names)
        reports = []
        for name in names:
            parts = {p.partition: p for p in states.values() if p.topic == name}
            before = configs[name].get(MIN_INSYNC, (None, 0))[0]
            wanted = str(want.min_insync_replicas)
            # Lowered only when asked for: a default never weakens a topic's durability.
            lowering = before is not None and before.isdigit() and int(before) > int(wanted)
            settle = (
                before != wanted
                and not (lowering and min_insync_replicas is None)
                and may_set_min_insync(want, before, parts.values())
            )
            if settle:
                await set_topic_config(self._admin, name, configs[name], MIN_INSYNC, wanted)
            reports.append(
                ReassignmentReport(
                    topic=name,
                    replication_factor=want.replication_factor,
                    reassigned={
                        p.partition: (p.replicas, tuple(targets[(name, p.partition)]))
                        for p in ours
                        if p.topic == name and (name, p.partition) in targets
                    },
                    replicas={n: p.replicas for n, p in sorted(parts.items())},
                    isr={n: p.isr for n, p in sorted(parts.items())},
                    min_insync=None if before == wanted else (before, wanted),
                    min_insync_set=before == wanted or settle,
                )
            )
        return reports
