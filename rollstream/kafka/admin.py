"""Topic management: create rollstream's topics idempotently, list and describe them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code
from aiokafka.structs import TopicPartition
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.errors import BrokerError
from rollstream.kafka.clients import make_admin, make_consumer
from rollstream.schemas.topics import TopicSpec
from rollstream.settings import KafkaSettings

_TOPIC_ALREADY_EXISTS = 36


class TopicsSettings(BaseSettings):
    """How ``rollstream topics create`` sizes the topics (``ROLLSTREAM_TOPICS_*``)."""

    model_config = SettingsConfigDict(env_prefix="ROLLSTREAM_TOPICS_", frozen=True, extra="ignore")

    partitions: int = Field(
        default=6, ge=1, description="Partitions of events, trajectories, scored and tasks."
    )
    replication_factor: int = Field(default=1, ge=1, description="Replicas of every topic.")
    retention_days: float = Field(
        default=30.0, gt=0, description="Retention of the events topic (the replay source)."
    )


@dataclass(frozen=True)
class TopicReport:
    """What ``create_topics`` did with one topic.

    ``drift`` lists configs of an existing topic that differ from the spec, as
    ``{name: (wanted, actual)}``; rollstream never rewrites an existing topic's configs.
    """

    name: str
    created: bool
    partitions: int
    drift: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicDescription:
    """A topic's partitions, non-default configs, and the records it holds per partition."""

    name: str
    partitions: int
    leaders: dict[int, int]
    configs: dict[str, str]
    offsets: dict[int, tuple[int, int]]  # partition -> (beginning, end)

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
        self, specs: list[TopicSpec], replication_factor: int = 1
    ) -> list[TopicReport]:
        """Create the topics that do not exist; report drift on those that do."""
        response = await self._admin.create_topics(
            [
                NewTopic(s.name, s.partitions, replication_factor, topic_configs=s.configs)
                for s in specs
            ]
        )
        existing: set[str] = set()
        for topic, code, message in response.topic_errors:
            if code == _TOPIC_ALREADY_EXISTS:
                existing.add(topic)
            elif code != 0:
                error = for_code(code)
                raise BrokerError(
                    f"creating topic {topic!r} failed: {error.__name__}: {message}",
                    retriable=bool(getattr(error, "retriable", False)),
                )
        reports = []
        configs = await self.configs([s.name for s in specs if s.name in existing])
        metadata = {t["topic"]: t for t in await self._admin.describe_topics(list(existing))}
        for spec in specs:
            if spec.name not in existing:
                reports.append(TopicReport(spec.name, True, spec.partitions))
                continue
            actual = configs.get(spec.name, {})
            drift = {
                key: (want, actual.get(key))
                for key, want in spec.configs.items()
                if actual.get(key) != want
            }
            partitions = len(metadata[spec.name]["partitions"])
            if partitions != spec.partitions:
                drift["partitions"] = (str(spec.partitions), str(partitions))
            reports.append(TopicReport(spec.name, False, partitions, drift))
        return reports

    async def list_topics(self) -> list[str]:
        """Every topic name in the cluster, internal ones excluded, sorted."""
        return sorted(t for t in await self._admin.list_topics() if not t.startswith("__"))

    async def configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        """Each topic's configs that are set on the topic (not broker defaults)."""
        if not names:
            return {}
        responses = await self._admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
        result: dict[str, dict[str, str]] = {}
        for response in responses:
            for code, message, _rtype, name, entries in response.resources:
                if code != 0:
                    raise BrokerError(f"describing topic {name!r} failed: {message}")
                # Entry: (name, value, read_only, config_source, is_sensitive, synonyms);
                # source 1 is DYNAMIC_TOPIC_CONFIG, i.e. set for this topic.
                result[name] = {e[0]: e[1] for e in entries if e[3] == 1}
        return result

    async def describe(self, names: list[str]) -> list[TopicDescription]:
        """Partitions, leaders, topic-level configs and offsets of ``names``."""
        metadata: list[dict[str, Any]] = await self._admin.describe_topics(names)
        missing = [t["topic"] for t in metadata if t["error_code"] != 0]
        if missing:
            raise BrokerError(f"no such topic: {', '.join(missing)}", retriable=False)
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
                    )
                )
        finally:
            await consumer.stop()
        return sorted(descriptions, key=lambda d: d.name)
