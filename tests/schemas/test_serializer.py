"""Golden bytes, round trips and bad input for the single-object Avro serializer."""

from __future__ import annotations

import os
from pathlib import Path

import fastavro.schema
import pytest

from rollstream.errors import SerializationError, UnknownSchemaError
from rollstream.schemas import (
    RECORD_MODELS,
    AvroSerializer,
    Caller,
    CallRecord,
    SessionStarted,
    fingerprint,
    fingerprint_of,
)
from rollstream.schemas.registry import current_schemas
from rollstream.schemas.serializer import HEADER_LEN, MAGIC
from tests.schemas.samples import CALL, SAMPLES, STARTED

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ROLLSTREAM_UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def serializer() -> AvroSerializer:
    return AvroSerializer()


def test_every_model_has_a_sample() -> None:
    assert set(SAMPLES) == {m.avro_name for m in RECORD_MODELS}


def test_crc64_avro_fingerprint_matches_the_avro_reference_value() -> None:
    # Avro's schema-tests list 'int' with fingerprint 8247732601305521295 (signed 64-bit),
    # written little-endian in single-object encoding.
    assert fingerprint("int") == (8247732601305521295).to_bytes(8, "little", signed=True)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_golden_bytes(serializer: AvroSerializer, name: str) -> None:
    record = SAMPLES[name]
    schema = current_schemas()[name]
    path = GOLDEN / f"{name}-{schema.fingerprint.hex()}.bin"
    encoded = serializer.encode(record)
    if UPDATE and not path.exists():
        path.write_bytes(encoded)
    assert path.exists(), (
        f"no golden file for the current {name}: rerun with ROLLSTREAM_UPDATE_GOLDEN=1"
    )
    assert encoded == path.read_bytes()
    assert encoded[:2] == MAGIC
    assert encoded[2:HEADER_LEN] == schema.fingerprint
    assert serializer.decode(path.read_bytes()) == record


def test_every_golden_file_still_decodes(serializer: AvroSerializer) -> None:
    """Bytes written by any released schema version stay readable by the current code."""
    files = sorted(GOLDEN.glob("*.bin"))
    assert len(files) >= len(SAMPLES)
    for path in files:
        name = path.stem.rsplit("-", 1)[0]
        record = serializer.decode(path.read_bytes())
        assert type(record).avro_name == name


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip(serializer: AvroSerializer, name: str) -> None:
    record = SAMPLES[name]
    assert serializer.decode(serializer.encode(record)) == record


def test_fingerprint_is_of_the_parsing_canonical_form() -> None:
    schema = current_schemas()["rollstream.CallRecord"]
    canonical = fastavro.schema.to_parsing_canonical_form(schema.schema)
    assert schema.fingerprint == bytes.fromhex(
        fastavro.schema.fingerprint(canonical, "CRC-64-AVRO")
    )
    # Docs and defaults are not part of the canonical form: editing a doc keeps the fingerprint.
    edited = dict(schema.schema, doc="another doc")
    assert fingerprint(edited) == schema.fingerprint


def test_decode_as_checks_the_type(serializer: AvroSerializer) -> None:
    data = serializer.encode(STARTED)
    assert serializer.decode_as(data, SessionStarted) == STARTED
    with pytest.raises(SerializationError, match=r"expected rollstream\.CallRecord"):
        serializer.decode_as(data, CallRecord)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not an Avro single-object record"),
        (b'{"json": true}', "not an Avro single-object record"),
        (MAGIC + b"\x00" * 3, "not an Avro single-object record"),
    ],
)
def test_garbage_is_a_non_retriable_serialization_error(
    serializer: AvroSerializer, data: bytes, message: str
) -> None:
    with pytest.raises(SerializationError, match=message) as info:
        serializer.decode(data)
    assert info.value.retriable is False


def test_unknown_fingerprint_is_retriable(serializer: AvroSerializer) -> None:
    data = MAGIC + b"\x01" * 8 + b"\x00"
    with pytest.raises(UnknownSchemaError) as info:
        serializer.decode(data)
    assert info.value.retriable is True
    assert info.value.fingerprint == b"\x01" * 8
    assert fingerprint_of(data) == b"\x01" * 8


def test_truncated_body_fails_cleanly(serializer: AvroSerializer) -> None:
    data = serializer.encode(CALL)
    with pytest.raises(SerializationError, match=r"cannot decode rollstream\.CallRecord") as info:
        serializer.decode(data[:-20])
    assert info.value.retriable is False


def test_trailing_bytes_are_rejected(serializer: AvroSerializer) -> None:
    with pytest.raises(SerializationError, match="trailing bytes"):
        serializer.decode(serializer.encode(STARTED) + b"\x00")


def test_invalid_values_in_the_body_are_a_serialization_error(serializer: AvroSerializer) -> None:
    # A body that decodes as Avro but breaks the model's rules (negative seq).
    bad = CALL.model_copy(update={"seq": -1})
    data = serializer.encode(bad)
    with pytest.raises(SerializationError, match=r"invalid rollstream\.CallRecord"):
        serializer.decode(data)


def test_a_call_keeps_who_called(serializer: AvroSerializer) -> None:
    caller = Caller(session="3b9261f4", agent="a59a38832687ef644", parent="01a2", retry=2)
    record = CALL.model_copy(update={"caller": caller})
    assert serializer.decode(serializer.encode(record)) == record
