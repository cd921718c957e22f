"""Avro single-object encoding of our records: ``C3 01``, the 8-byte fingerprint, the body.

The fingerprint names the writer schema, so a reader resolves any version it knows (or learns
from the schema store) against its own schema: records written before a field was added still
decode, with the field's default; records from a newer writer decode with the unknown field
dropped.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import fastavro
from pydantic import ValidationError

from rollstream.errors import SerializationError
from rollstream.schemas.base import AvroRecord
from rollstream.schemas.registry import KnownSchema, SchemaRegistry

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8


def fingerprint_of(data: bytes) -> bytes:
    """The writer fingerprint in a single-object encoded record's header."""
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise SerializationError(
            f"not an Avro single-object record (starts with {data[:2].hex() or 'nothing'}, "
            f"expected {MAGIC.hex()})"
        )
    return data[2:HEADER_LEN]


@dataclass(frozen=True)
class DecodedDatum:
    """A record decoded to a dict: the writer schema it was written with, and its fields."""

    writer: KnownSchema
    datum: dict[str, Any]


class AvroSerializer:
    """Encodes models to single-object Avro and decodes them back, resolving writer schemas."""

    def __init__(self, registry: SchemaRegistry | None = None) -> None:
        self.registry = registry or SchemaRegistry.default()
        # fastavro parses a schema again on every write unless it carries its write hint, which
        # the registry's parsed forms (shared with reading) leave out: half of a CallRecord's
        # encoding time went there.
        self._writers: dict[bytes, Any] = {}

    def encode(self, record: AvroRecord) -> bytes:
        """``record`` as single-object Avro bytes, written with its current schema."""
        schema = self.registry.schema_for(type(record))
        writer = self._writers.get(schema.fingerprint)
        if writer is None:
            writer = fastavro.parse_schema(schema.schema, named_schemas={})
            self._writers[schema.fingerprint] = writer
        buf = io.BytesIO()
        buf.write(MAGIC)
        buf.write(schema.fingerprint)
        try:
            fastavro.schemaless_writer(buf, writer, record.to_avro())
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerializationError(f"cannot encode {schema.name}: {exc}") from exc
        return buf.getvalue()

    def decode_datum(self, data: bytes) -> DecodedDatum:
        """Decode to a dict, resolved against our reader schema when we have one."""
        writer = self.registry.writer(fingerprint_of(data))
        reader = self.registry.reader(writer.name)
        reader_schema = reader[0] if reader else writer
        body = io.BytesIO(data)
        body.seek(HEADER_LEN)
        try:
            if reader_schema.fingerprint == writer.fingerprint:
                datum = fastavro.schemaless_reader(body, reader_schema.parsed, None)
            else:
                datum = fastavro.schemaless_reader(body, writer.parsed, reader_schema.parsed)
        except Exception as exc:
            # fastavro raises anything from EOFError to SchemaResolutionError on bad bytes.
            raise SerializationError(f"cannot decode {writer.name}: {exc}") from exc
        if not isinstance(datum, dict):
            raise SerializationError(
                f"{writer.name}: decoded to {type(datum).__name__}, not a record"
            )
        if body.tell() != len(data):
            raise SerializationError(
                f"{writer.name}: {len(data) - body.tell()} trailing bytes after the record"
            )
        return DecodedDatum(writer, datum)

    def decode(self, data: bytes) -> AvroRecord:
        """Decode to the model of the record's type."""
        decoded = self.decode_datum(data)
        reader = self.registry.reader(decoded.writer.name)
        if reader is None:
            raise SerializationError(f"no model for record type {decoded.writer.name}")
        try:
            return reader[1].from_avro(decoded.datum)
        except ValidationError as exc:
            raise SerializationError(f"invalid {decoded.writer.name}: {exc}") from exc

    def decode_as[R: AvroRecord](self, data: bytes, model: type[R]) -> R:
        """Decode and check the record is a ``model``."""
        record = self.decode(data)
        if not isinstance(record, model):
            raise SerializationError(f"expected {model.avro_name}, got {type(record).avro_name}")
        return record
