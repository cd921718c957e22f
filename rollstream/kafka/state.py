"""A processor's per-partition state on the compacted state topic (the reconstructor's, today).

Each transaction that commits an input partition's offset may also write that partition's
state (the reconstructor: its commit offset and the sessions emitted at or past it, see
``PartitionBuffers.state``). A new owner of the partition reads the last such state before
consuming, so re-reading from the committed offset never emits anything twice. The records
are JSON: internal, versioned, read only by this module.

A state can outgrow one record (the reconstructor: while a long session holds a partition's
commit offset back, every session emitted after it is remembered). So a state is written as
records that each fit the record budget: the head, under the partition's key, with the state's
other fields, the first entries of its ``emitted`` map and how many records the state has;
the other entries in chunks keyed ``<key>#<n>``, written in the same transaction. Chunks a
smaller state no longer needs get a tombstone (compaction's clean-up); a reader only takes as
many chunks as the head names.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiokafka.structs import TopicPartition

from rollstream.errors import ConfigurationError
from rollstream.kafka.clients import make_consumer
from rollstream.kafka.reading import iter_records, written_ends
from rollstream.schemas import RECORD_BUDGET_BYTES
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)
# Room in each record for the key's chunk suffix and the head's other fields.
_HEAD_ROOM = 1024


def state_key(group_id: str, tp: TopicPartition) -> bytes:
    """The compaction key of one input partition's state for one consumer group."""
    return f"{group_id}/{tp.topic}/{tp.partition}".encode()


def chunk_key(key: bytes, index: int) -> bytes:
    """The key of a state's chunk ``index`` (1 and up; the head is ``key`` itself)."""
    return key + b"#%d" % index


def encode_state(state: dict[str, Any]) -> bytes:
    """One state record's value."""
    return json.dumps(state, separators=(",", ":"), sort_keys=True).encode()


def state_records(
    key: bytes, state: dict[str, Any], previous_chunks: int = 0, budget: int = RECORD_BUDGET_BYTES
) -> list[tuple[bytes, bytes | None]]:
    """The state as (key, value) records that each fit ``budget``, head first.

    ``previous_chunks`` is how many records the partition's last state had: the chunks past
    this one's get a tombstone (value None).
    """
    room = budget - len(key) - _HEAD_ROOM
    chunks: list[dict[str, int]] = [{}]
    size = 0
    for session, offset in (state.get("emitted") or {}).items():
        entry = len(json.dumps(session)) + len(str(offset)) + 2  # "session":offset,
        if size + entry > room and chunks[-1]:
            chunks.append({})
            size = 0
        chunks[-1][session] = offset
        size += entry
    head = {**state, "emitted": chunks[0], "chunks": len(chunks)}
    records: list[tuple[bytes, bytes | None]] = [(key, encode_state(head))]
    records += [
        (chunk_key(key, i), encode_state({"emitted": chunk}))
        for i, chunk in enumerate(chunks[1:], 1)
    ]
    records += [(chunk_key(key, i), None) for i in range(len(chunks), previous_chunks)]
    return records


def assemble_state(key: bytes, latest: dict[bytes, bytes]) -> dict[str, Any] | None:
    """A state from the latest value of each of its records (None: never written)."""
    if key not in latest:
        return None
    state: dict[str, Any] = json.loads(latest[key])
    emitted = dict(state.get("emitted") or {})
    for i in range(1, int(state.get("chunks", 1))):
        chunk = latest.get(chunk_key(key, i))
        if chunk is None:
            # Cannot happen while every state is written in one transaction; if it does, the
            # sessions it listed may be emitted again on the re-read: say so.
            log.error("state %s: chunk %d of %s missing", key.decode(), i, state.get("chunks"))
            continue
        emitted.update(json.loads(chunk).get("emitted") or {})
    state["emitted"] = emitted
    return state


async def load_states(
    kafka: KafkaSettings, state_topic: str, group_id: str, tps: list[TopicPartition]
) -> dict[TopicPartition, dict[str, Any]]:
    """The last committed state of each of ``tps`` (absent: never written)."""
    wanted = {state_key(group_id, tp): tp for tp in tps}
    latest: dict[bytes, bytes] = {}
    consumer = make_consumer(kafka)  # read_committed: only states of committed transactions
    await consumer.start()
    try:
        # Up to every record written by now, not to the last stable offset: the topic is shared
        # by every input partition, and a transaction still open on it (another partition's,
        # an expelled member's) would hide the states committed after it, while the group's
        # committed offset is already theirs: a state older than its offset.
        written = await written_ends(kafka, state_topic)
        async for message in iter_records(consumer, state_topic, end=written):
            key = message.key or b""
            if (key in wanted or key.rpartition(b"#")[0] in wanted) and message.value is not None:
                latest[key] = message.value
    except ConfigurationError:
        pass  # no state topic yet: nothing was ever emitted
    finally:
        await consumer.stop()
    found = {tp: assemble_state(key, latest) for key, tp in wanted.items()}
    return {tp: state for tp, state in found.items() if state is not None}
