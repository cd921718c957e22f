"""The base of every record model: a frozen pydantic model bound to one Avro schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, at the microsecond precision records keep."""
    return datetime.now(UTC)


class Model(BaseModel):
    """A frozen model that rejects unknown fields (typos fail loudly)."""

    # Raw blobs (compressed requests, artifacts) are not UTF-8: base64 them in JSON.
    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )


class AvroRecord(Model):
    """A model that is also a top-level Avro record of ours.

    ``avro_name`` is the full name of its schema in ``schemas/avro``; the serializer finds the
    writer schema from it and the model from a decoded schema's name.
    """

    avro_name: ClassVar[str]

    def to_avro(self) -> dict[str, Any]:
        """The record as the dict fastavro writes (packed arrays as bytes)."""
        return self.model_dump(mode="python")

    @classmethod
    def from_avro(cls, datum: dict[str, Any]) -> Self:
        """Build the model from a dict fastavro read.

        Fields a newer writer added and this model does not know were already dropped by Avro
        schema resolution against our reader schema.
        """
        return cls.model_validate(datum)
