"""Known Avro schemas: the current reader schema of each record, and writer schemas by fingerprint.

Fingerprints are CRC-64-AVRO of the Parsing Canonical Form, as in Avro's single-object encoding.
Every released version of a schema is kept in ``avro/history`` (a test enforces that the current
one is there), so records written by older code stay readable without any service; schemas of
newer writers are learnt at run time from the schema store topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import fastavro.schema

from rollstream.errors import SerializationError, UnknownSchemaError
from rollstream.schemas.base import AvroRecord
from rollstream.schemas.calls import CallRecord
from rollstream.schemas.control import PolicyVersion
from rollstream.schemas.deadletter import DeadLetter
from rollstream.schemas.sessions import SessionEnded, SessionStarted
from rollstream.schemas.tasks import Task
from rollstream.schemas.trajectories import Scored, Trajectory

RECORD_MODELS: tuple[type[AvroRecord], ...] = (
    CallRecord,
    SessionStarted,
    SessionEnded,
    Trajectory,
    Scored,
    Task,
    DeadLetter,
    PolicyVersion,
)


def fingerprint(schema: dict[str, Any] | str) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of ``schema``, in the byte order Avro writes it."""
    try:
        canonical = fastavro.schema.to_parsing_canonical_form(schema)
    except Exception as exc:
        raise SerializationError(f"invalid Avro schema: {exc}") from exc
    # fastavro's hex digest is already the little-endian byte sequence of the 64-bit value.
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))


@dataclass(frozen=True)
class KnownSchema:
    """One schema version: its full name, fingerprint, JSON form and fastavro-parsed form."""

    name: str
    fingerprint: bytes
    schema: dict[str, Any] = field(repr=False)
    parsed: Any = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, schema: dict[str, Any] | str) -> KnownSchema:
        """Parse a fully expanded schema (no references to types defined elsewhere)."""
        raw: dict[str, Any] = json.loads(schema) if isinstance(schema, str) else schema
        try:
            # A fresh namespace of named types per version: v1 and v2 of a record coexist.
            parsed: Any = fastavro.parse_schema(raw, named_schemas={}, _write_hint=False)
        except Exception as exc:
            raise SerializationError(f"invalid Avro schema: {exc}") from exc
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            raise SerializationError("a top-level schema must be a record")
        return cls(str(parsed["name"]), fingerprint(raw), raw, parsed)

    def to_json(self) -> str:
        """The schema as compact JSON (what the schema store publishes)."""
        return json.dumps(self.schema, separators=(",", ":"), sort_keys=True)


def _load_packaged(filename: str) -> dict[str, Any]:
    avro_dir = resources.files("rollstream.schemas").joinpath("avro")
    with resources.as_file(avro_dir.joinpath(filename)) as path:
        # load_schema resolves references to named types in sibling files (rollstream.X.avsc).
        loaded = fastavro.schema.load_schema(str(path), _write_hint=False)
    if not isinstance(loaded, dict):
        raise SerializationError(f"{filename} is not a record schema")
    return loaded


@cache
def current_schemas() -> dict[str, KnownSchema]:
    """The schema of each record model as shipped in ``avro/``, by full name."""
    return {
        model.avro_name: KnownSchema.from_json(_load_packaged(f"{model.avro_name}.avsc"))
        for model in RECORD_MODELS
    }


@cache
def history_schemas() -> tuple[KnownSchema, ...]:
    """Every released schema version kept in ``avro/history``."""
    history = resources.files("rollstream.schemas").joinpath("avro", "history")
    found = []
    for entry in sorted(history.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".avsc"):
            found.append(KnownSchema.from_json(entry.read_text()))
    return tuple(found)


class SchemaRegistry:
    """Writer schemas by fingerprint, and a reader schema and model per record name.

    The default registry reads with the schemas shipped in this package; tests and tools can
    build one with other reader schemas (an older or newer version of a record).
    """

    def __init__(
        self,
        readers: Iterable[tuple[KnownSchema, type[AvroRecord]]] = (),
        writers: Iterable[KnownSchema] = (),
    ) -> None:
        self._readers: dict[str, tuple[KnownSchema, type[AvroRecord]]] = {}
        self._writers: dict[bytes, KnownSchema] = {}
        for schema, model in readers:
            self._readers[schema.name] = (schema, model)
            self._writers[schema.fingerprint] = schema
        for schema in writers:
            self.add_writer(schema)

    @classmethod
    def default(cls) -> SchemaRegistry:
        """Readers: the shipped schemas; writers: those plus every historical version."""
        current = current_schemas()
        return cls(
            readers=[(current[m.avro_name], m) for m in RECORD_MODELS],
            writers=history_schemas(),
        )

    def add_writer(self, schema: KnownSchema | dict[str, Any] | str) -> KnownSchema:
        """Learn a writer schema (e.g. from the schema store); returns it parsed."""
        known = schema if isinstance(schema, KnownSchema) else KnownSchema.from_json(schema)
        self._writers.setdefault(known.fingerprint, known)
        return self._writers[known.fingerprint]

    def writer(self, fp: bytes) -> KnownSchema:
        """The writer schema with fingerprint ``fp``; UnknownSchemaError (retriable) if none."""
        try:
            return self._writers[fp]
        except KeyError:
            raise UnknownSchemaError(fp) from None

    def reader(self, name: str) -> tuple[KnownSchema, type[AvroRecord]] | None:
        """The reader schema and model for record ``name``, if this process has a model for it."""
        return self._readers.get(name)

    def schema_for(self, model: type[AvroRecord]) -> KnownSchema:
        """The schema records of ``model`` are written with."""
        try:
            return self._readers[model.avro_name][0]
        except KeyError:
            raise SerializationError(f"no schema registered for {model.__name__}") from None

    @property
    def writers(self) -> list[KnownSchema]:
        """Every writer schema known, e.g. to publish to the schema store."""
        return list(self._writers.values())

    @property
    def readers(self) -> list[KnownSchema]:
        """The reader (current) schema of each record this registry has a model for."""
        return [schema for schema, _ in self._readers.values()]
