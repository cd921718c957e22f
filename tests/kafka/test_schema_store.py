"""The schema store: a newer writer's schema reaches an older reader through Kafka."""

from __future__ import annotations

import pytest

from rollstream.errors import UnknownSchemaError
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import AvroSerializer, CallRecord, SchemaRegistry, TopicNames
from rollstream.schemas.registry import history_schemas
from rollstream.settings import KafkaSettings
from tests.schemas.samples import CALL
from tests.schemas.test_evolution import V2, CallRecordV2

pytestmark = pytest.mark.integration


async def test_v2_records_become_readable_by_v1_code_through_the_store(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames
) -> None:
    v2_serializer = AvroSerializer(
        SchemaRegistry(readers=[(V2, CallRecordV2)], writers=history_schemas())
    )
    async with SchemaStore(kafka_settings, v2_serializer.registry) as writer_store:
        await writer_store.publish()
    v2_bytes = v2_serializer.encode(CallRecordV2(**CALL.model_dump(), harness_version="9"))

    v1_serializer = AvroSerializer()
    with pytest.raises(UnknownSchemaError):
        v1_serializer.decode(v2_bytes)
    async with SchemaStore(kafka_settings, v1_serializer.registry) as reader_store:
        assert await reader_store.refresh() == 1  # learnt exactly V2
        assert await reader_store.refresh() == 0  # nothing new the second time
    assert v1_serializer.decode_as(v2_bytes, CallRecord) == CALL


async def test_refresh_without_the_topic_learns_nothing(kafka_settings: KafkaSettings) -> None:
    async with SchemaStore(kafka_settings, SchemaRegistry.default()) as store:
        assert await store.refresh() == 0
