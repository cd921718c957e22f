"""The schema store: writer schemas kept in the compacted ``<prefix>.schemas`` topic.

Writers publish the schemas they write with before producing; readers learn the schemas they do
not ship (from a newer rollstream) by reading the topic. Key: fingerprint (hex); value: the
schema's JSON. Compaction keeps one copy of each.
"""

from __future__ import annotations

import json
import logging

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from rollstream.errors import BrokerError, SerializationError
from rollstream.kafka.clients import make_consumer, make_producer, topic_partitions
from rollstream.schemas.registry import KnownSchema, SchemaRegistry
from rollstream.schemas.topics import TopicNames
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)


class SchemaStore:
    """Publishes our schemas to, and learns writer schemas from, the schemas topic."""

    def __init__(self, settings: KafkaSettings, registry: SchemaRegistry) -> None:
        self.settings = settings
        self.registry = registry
        self.topic = TopicNames(settings.topic_prefix).schemas
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        """Connect (a producer for publishing, a group-less consumer for reading)."""
        self._producer = make_producer(self.settings, linger_ms=0)
        self._consumer = make_consumer(self.settings, isolation_level="read_uncommitted")
        try:
            await self._producer.start()
            await self._consumer.start()
        except BaseException:
            await self.stop()  # close whichever client did connect
            raise

    async def stop(self) -> None:
        """Close both clients."""
        if self._producer is not None:
            await self._producer.stop()
        if self._consumer is not None:
            await self._consumer.stop()

    async def __aenter__(self) -> SchemaStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def publish(self, schemas: list[KnownSchema] | None = None) -> None:
        """Publish ``schemas`` (default: the ones this process writes with)."""
        assert self._producer is not None, "call start() first"
        try:
            for schema in schemas if schemas is not None else self.registry.readers:
                await self._producer.send(
                    self.topic, schema.to_json().encode(), key=schema.fingerprint.hex().encode()
                )
            await self._producer.flush()
        except KafkaError as exc:
            raise BrokerError(f"publishing schemas to {self.topic} failed: {exc}") from exc

    async def refresh(self) -> int:
        """Read the whole topic and learn every schema in it; returns how many were new."""
        assert self._consumer is not None, "call start() first"
        tps = await topic_partitions(self._consumer, self.topic)
        if tps is None:
            log.warning("schema store topic %s does not exist", self.topic)
            return 0
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        end = await self._consumer.end_offsets(tps)
        known = {s.fingerprint for s in self.registry.writers}
        learnt = 0
        while any([await self._consumer.position(tp) < end[tp] for tp in tps]):
            batches = await self._consumer.getmany(*tps, timeout_ms=500)
            for messages in batches.values():
                for message in messages:
                    if message.value is None:
                        continue
                    try:
                        schema = self.registry.add_writer(json.loads(message.value))
                    except (ValueError, SerializationError) as exc:
                        log.warning("skipping a bad schema at offset %d: %s", message.offset, exc)
                        continue
                    if schema.fingerprint not in known:
                        known.add(schema.fingerprint)
                        learnt += 1
        return learnt
