"""``rollstream tail``: decode and print the records flowing through a topic.

Formatting is pure (``render``); ``tail`` is the consumer loop. An undecodable record is printed
as such and the loop goes on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TextIO

from aiokafka.structs import ConsumerRecord
from pydantic import BaseModel

from rollstream.errors import BrokerError, RollstreamError, SerializationError, UnknownSchemaError
from rollstream.kafka.clients import make_consumer, topic_partitions
from rollstream.kafka.schema_store import SchemaStore
from rollstream.schemas import AvroSerializer, decompress_json
from rollstream.schemas.packed import _Packed
from rollstream.schemas.topics import TopicNames
from rollstream.settings import KafkaSettings

_BLOB_FIELDS = frozenset({"harness_request", "upstream_request", "response"})
_PREVIEW = 8


def _display(value: Any, field: str = "") -> Any:
    """A JSON-able view of a record: arrays summarised, blobs opened, enums by value."""
    if isinstance(value, BaseModel):
        return {name: _display(getattr(value, name), name) for name in type(value).model_fields}
    if isinstance(value, _Packed):
        head = value[:_PREVIEW].to_list()
        shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in head)
        more = ", ..." if len(value) > _PREVIEW else ""
        return f"{len(value)} x {value.kind} [{shown}{more}]"
    if isinstance(value, bytes):
        if field in _BLOB_FIELDS:
            try:
                return decompress_json(value)
            except SerializationError:
                pass
        try:
            return value.decode()
        except UnicodeDecodeError:
            return f"<{len(value)} bytes>"
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [_display(v, field) for v in value]
    if isinstance(value, dict):
        return {k: _display(v, k) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Rendered:
    """One record ready to print; ``ok`` is False when it could not be decoded."""

    ok: bool
    text: str


def render(message: ConsumerRecord[bytes, bytes], serializer: AvroSerializer, fmt: str) -> Rendered:
    """Decode one Kafka message and format it as ``pretty`` (multi-line) or ``json`` (one line)."""
    meta = {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp": datetime.fromtimestamp(message.timestamp / 1000, UTC).isoformat(),
        "key": message.key.decode("utf-8", "replace") if message.key is not None else None,
    }
    value = message.value or b""
    try:
        record = serializer.decode(value)
        ok, kind, body = True, type(record).__name__, _display(record)
    except RollstreamError as exc:
        ok, kind = False, "UNDECODABLE"
        body = {
            "error": f"{type(exc).__name__}: {exc}",
            "retriable": exc.retriable,
            "size": len(value),
            "head": value[:32].hex(),
        }
    if fmt == "json":
        return Rendered(ok, json.dumps(meta | {"type": kind, "record": body}, default=str))
    header = (
        f"{meta['topic']}[{meta['partition']}]@{meta['offset']} {meta['timestamp']} "
        f"key={meta['key']} {kind}"
    )
    return Rendered(ok, header + "\n" + json.dumps(body, indent=2, default=str))


@dataclass(frozen=True)
class TailOptions:
    """What to read and how to print it."""

    topic: str
    from_end: bool = False
    follow: bool = False
    max_records: int | None = None
    fmt: str = "pretty"
    idle_timeout_s: float = 1.0


async def tail(
    settings: KafkaSettings,
    options: TailOptions,
    out: TextIO,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[int, int]:
    """Print the records of a topic; returns (records printed, records undecodable).

    No consumer group: tailing never moves anyone's committed offsets. Without ``follow`` it
    stops once every partition is read to the end it had when tailing began.
    """
    names = TopicNames(settings.topic_prefix)
    topic = names.resolve(options.topic)
    serializer = AvroSerializer()
    store = SchemaStore(settings, serializer.registry)
    consumer = make_consumer(settings, isolation_level="read_committed")
    await consumer.start()
    await store.start()
    printed = undecodable = 0
    try:
        tps = await topic_partitions(consumer, topic)
        if tps is None:
            raise BrokerError(f"no such topic: {topic}", retriable=False)
        await store.refresh()
        consumer.assign(tps)
        if options.from_end:
            await consumer.seek_to_end(*tps)
        else:
            await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        refreshed_for: set[bytes] = set()
        while not stop():
            batches = await consumer.getmany(*tps, timeout_ms=int(options.idle_timeout_s * 1000))
            for messages in batches.values():
                for message in messages:
                    rendered = render(message, serializer, options.fmt)
                    unknown = None if rendered.ok else _unknown_schema(message, serializer)
                    if unknown is not None and unknown not in refreshed_for:
                        # A newer writer may have published its schema since we started.
                        refreshed_for.add(unknown)
                        await store.refresh()
                        rendered = render(message, serializer, options.fmt)
                    out.write(rendered.text + "\n")
                    out.flush()
                    printed += 1
                    undecodable += not rendered.ok
                    if options.max_records is not None and printed >= options.max_records:
                        return printed, undecodable
            if not options.follow and not batches:
                positions = [await consumer.position(tp) for tp in tps]
                if all(pos >= end[tp] for pos, tp in zip(positions, tps, strict=True)):
                    break
            await asyncio.sleep(0)
    finally:
        await store.stop()
        await consumer.stop()
    return printed, undecodable


def _unknown_schema(
    message: ConsumerRecord[bytes, bytes], serializer: AvroSerializer
) -> bytes | None:
    """The fingerprint of a record whose writer schema we do not know, else None."""
    try:
        serializer.decode_datum(message.value or b"")
    except UnknownSchemaError as exc:
        return exc.fingerprint
    except RollstreamError:
        return None
    return None
