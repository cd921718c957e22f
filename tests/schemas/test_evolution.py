"""Schema evolution: old records read by new code and new records read by old code."""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
import pytest

from rollstream.errors import SerializationError, UnknownSchemaError
from rollstream.schemas import ApiKind, AvroSerializer, CallRecord, KnownSchema, SchemaRegistry
from rollstream.schemas.registry import current_schemas, history_schemas
from tests.schemas.samples import CALL


class CallRecordV2(CallRecord):
    """What a later rollstream might ship: one more field, with a default."""

    harness_version: str = "unknown"


def _call_schema_with(field: dict[str, Any], symbols: list[str] | None = None) -> KnownSchema:
    schema = copy.deepcopy(current_schemas()["rollstream.CallRecord"].schema)
    schema["fields"].append(field)
    if symbols is not None:
        api = next(f for f in schema["fields"] if f["name"] == "api")
        api["type"]["symbols"] = symbols
    return KnownSchema.from_json(schema)


V2 = _call_schema_with({"name": "harness_version", "type": "string", "default": "unknown"})


def _registry(reader: KnownSchema, model: type[CallRecord]) -> SchemaRegistry:
    return SchemaRegistry(readers=[(reader, model)], writers=history_schemas())


def test_v2_has_another_fingerprint() -> None:
    assert V2.fingerprint != current_schemas()["rollstream.CallRecord"].fingerprint


def test_v1_record_read_by_v2_code_gets_the_default() -> None:
    v1_bytes = AvroSerializer().encode(CALL)
    v2_reader = AvroSerializer(_registry(V2, CallRecordV2))
    record = v2_reader.decode(v1_bytes)
    assert isinstance(record, CallRecordV2)
    assert record.harness_version == "unknown"
    assert record.model_dump(exclude={"harness_version"}) == CALL.model_dump()


def test_v2_record_read_by_v1_code_once_it_learns_the_writer_schema() -> None:
    v2_writer = AvroSerializer(_registry(V2, CallRecordV2))
    v2_record = CallRecordV2(**CALL.model_dump(), harness_version="2.1.197")
    v2_bytes = v2_writer.encode(v2_record)

    v1_reader = AvroSerializer()
    with pytest.raises(UnknownSchemaError) as info:
        v1_reader.decode(v2_bytes)
    assert info.value.retriable  # the schema store may know it: retry after a refresh

    v1_reader.registry.add_writer(V2.to_json())  # what SchemaStore.refresh() does
    record = v1_reader.decode(v2_bytes)
    assert type(record) is CallRecord
    assert record == CALL


def test_a_new_enum_symbol_reads_as_the_default_in_old_code() -> None:
    v2 = _call_schema_with(
        {"name": "harness_version", "type": "string", "default": "unknown"},
        symbols=[
            "chat_completions",
            "responses",
            "anthropic_messages",
            "completions",
            "unknown",
            "gemini",
            "bedrock",
        ],
    )
    datum = CallRecordV2(**CALL.model_dump()).to_avro() | {"api": "bedrock"}
    # Our ApiKind does not know "bedrock": write the datum directly, as newer code would.
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + v2.fingerprint)
    fastavro.schemaless_writer(buf, v2.parsed, datum)
    reader = AvroSerializer()
    reader.registry.add_writer(v2)
    record = reader.decode(buf.getvalue())
    assert isinstance(record, CallRecord)
    assert record.api is ApiKind.UNKNOWN


def test_a_field_added_without_default_cannot_read_old_records() -> None:
    """Where Avro does not allow the change, the error says so and is not retriable."""
    strict = _call_schema_with({"name": "harness_version", "type": "string"})
    v1_bytes = AvroSerializer().encode(CALL)
    with pytest.raises(SerializationError) as info:
        AvroSerializer(_registry(strict, CallRecordV2)).decode(v1_bytes)
    assert not info.value.retriable
    assert "harness_version" in str(info.value)
