"""What a record read from the scored topic is to a trainer: a Scored, or nothing (logged).

A Trajectory (read from the trajectories topic, unscored) becomes a Scored with reward None;
a tombstone, undecodable bytes or a record of another type are skipped with a warning. Only a
schema store the broker cannot serve raises (``BrokerError``): the broker, not the record.
"""

from __future__ import annotations

import logging

from aiokafka.errors import KafkaError

from rollstream.errors import BrokerError, SerializationError, UnknownSchemaError
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import AvroSerializer, Scored, Trajectory

log = logging.getLogger(__name__)


async def as_scored(
    serializer: AvroSerializer,
    store: SchemaStore | None,
    group: str,
    where: str,
    value: bytes | None,
) -> Scored | None:
    """The record as Scored; None, logged as ``group``'s skip at ``where``, if it is not one."""
    if value is None:
        log.warning("trainer stream %s: skipping a tombstone at %s", group, where)
        return None
    try:
        try:
            record = serializer.decode(value)
        except UnknownSchemaError:
            assert store is not None
            await store.refresh()  # a newer writer: its schema is in the store by now
            record = serializer.decode(value)
    except SerializationError as exc:
        log.warning("trainer stream %s: skipping undecodable %s: %s", group, where, exc)
        return None
    except KafkaError as exc:  # the schema store could not be read: the broker, not the record
        raise BrokerError(f"trainer stream {group}: {exc}", retriable=True) from exc
    if isinstance(record, Scored):
        return record
    if isinstance(record, Trajectory):
        return Scored(trajectory=record, reward=None, evaluator="", scored_at=record.created_at)
    log.warning(
        "trainer stream %s: skipping %s at %s (neither Scored nor Trajectory)",
        group,
        type(record).avro_name,
        where,
    )
    return None
