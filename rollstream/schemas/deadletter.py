"""DeadLetter: a record a consumer gave up on, with the reason."""

from __future__ import annotations

from pydantic import AwareDatetime, Field

from rollstream.schemas.base import AvroRecord


class DeadLetter(AvroRecord):
    """The original key and value, where they came from, and why processing failed."""

    avro_name = "rollstream.DeadLetter"

    source_topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    key: bytes | None = None
    value: bytes | None = None
    consumer_group: str
    error_type: str
    error_message: str
    retriable: bool = False
    attempts: int = Field(default=1, ge=1)
    failed_at: AwareDatetime
