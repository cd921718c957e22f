"""A processor's per-partition state on the compacted state topic (the reconstructor's, today).

Each transaction that commits an input partition's offset may also write that partition's
state (the reconstructor: its commit offset and the sessions emitted at or past it, see
``PartitionBuffers.state``). A new owner of the partition reads the last such state before
consuming, so re-reading from the committed offset never emits anything twice.

The ``emitted`` map is the large part (while a long session holds a partition's commit offset
back, every session emitted after it is remembered: thousands of entries at a cluster's load),
and it changes by a few entries per transaction. So it is written as it changes, not whole: one
record per entry, keyed ``<key>#e/<session>``, written when the entry appears and tombstoned
when it leaves; the head, under the partition's key, carries the other fields. A transaction
writes its head and its changes; compaction keeps the topic at about one record per live entry
(the topic's segment and tombstone settings bound what it holds before compaction). The head's
value is a version byte and JSON, which an older reader refuses to parse: it stops instead of
taking an empty ``emitted`` map for the state.

States written before (the whole map in the head and in chunks keyed ``<key>#<n>``) are still
read, and the first state written after them tombstones their chunks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka.structs import TopicPartition

from rollstream.errors import ConfigurationError
from rollstream.kafka.clients import make_consumer
from rollstream.kafka.reading import iter_records, written_ends
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)
#: The first byte of a head in this layout (an older reader fails on it: not JSON).
HEAD_VERSION = b"\x02"


def state_key(group_id: str, tp: TopicPartition) -> bytes:
    """The compaction key of one input partition's state for one consumer group."""
    return f"{group_id}/{tp.topic}/{tp.partition}".encode()


def chunk_key(key: bytes, index: int) -> bytes:
    """The key of an older state's chunk ``index`` (1 and up; the head is ``key`` itself)."""
    return key + b"#%d" % index


def entry_key(key: bytes, session: str) -> bytes:
    """The key of one ``emitted`` entry of the state under ``key``."""
    return key + b"#e/" + session.encode()


def encode_state(state: dict[str, Any]) -> bytes:
    """An older layout's state record value (JSON); see :func:`encode_head` for today's."""
    return json.dumps(state, separators=(",", ":"), sort_keys=True).encode()


def encode_head(state: dict[str, Any]) -> bytes:
    """A head's value: the version byte, then the state's fields but ``emitted`` as JSON."""
    return HEAD_VERSION + encode_state({k: v for k, v in state.items() if k != "emitted"})


def state_records(
    key: bytes,
    state: dict[str, Any],
    written: Mapping[str, int] | None = None,
    previous_chunks: int = 0,
) -> list[tuple[bytes, bytes | None]]:
    """The records that make the topic hold ``state`` where it held ``written``, head first.

    ``written`` is the ``emitted`` map the partition's last state had (None or empty: none);
    only the entries that changed are written, those gone get a tombstone (value None).
    ``previous_chunks`` is how many records the last state had in the older layout: its
    chunks get a tombstone.
    """
    written = written or {}
    emitted: Mapping[str, int] = state.get("emitted") or {}
    records: list[tuple[bytes, bytes | None]] = [(key, encode_head(state))]
    records += [
        (entry_key(key, session), str(int(offset)).encode())
        for session, offset in emitted.items()
        if written.get(session) != offset
    ]
    records += [(entry_key(key, session), None) for session in written if session not in emitted]
    records += [(chunk_key(key, i), None) for i in range(1, previous_chunks)]
    return records


def assemble_state(key: bytes, latest: dict[bytes, bytes]) -> dict[str, Any] | None:
    """A state from the latest value of each of its records (None: never written).

    ``latest`` holds the records read under ``key`` and its ``#`` suffixes, a tombstone
    having removed its key. A state of the older layout carries ``chunks``, how many records
    it had; one of today's does not.
    """
    if key not in latest:
        return None
    head = latest[key]
    if head.startswith(HEAD_VERSION):
        state: dict[str, Any] = json.loads(head[len(HEAD_VERSION) :])
        prefix = entry_key(key, "")
        state["emitted"] = {
            k[len(prefix) :].decode(): int(v) for k, v in latest.items() if k.startswith(prefix)
        }
        return state
    state = json.loads(head)
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
    state["chunks"] = int(state.get("chunks", 1))  # the older layout's mark (see resume)
    return state


async def load_states(
    kafka: KafkaSettings, state_topic: str, group_id: str, tps: list[TopicPartition]
) -> dict[TopicPartition, dict[str, Any]]:
    """The last committed state of each of ``tps`` (absent: never written)."""
    wanted = {state_key(group_id, tp): tp for tp in tps}
    records_of = tuple(key + b"#" for key in wanted)  # chunks and entries of a wanted state
    latest: dict[bytes, bytes] = {}
    consumer = make_consumer(kafka)  # read_committed: only states of committed transactions
    await consumer.start()
    try:
        # Up to every record written by now, not to the last stable offset: the topic is shared
        # by every input partition, and a transaction still open on it (another partition's,
        # an expelled member's) would hide the states committed after it, while the group's
        # committed offset is already theirs: a state older than its offset.
        written = await written_ends(kafka, state_topic)
        records = iter_records(consumer, state_topic, end=written, tombstones=True)
        async for message in records:
            key = message.key or b""
            if key not in wanted and not key.startswith(records_of):
                continue
            if message.value is None:
                latest.pop(key, None)  # compaction's delete, not applied yet
            else:
                latest[key] = message.value
    except ConfigurationError:
        pass  # no state topic yet: nothing was ever emitted
    finally:
        await consumer.stop()
    found = {tp: assemble_state(key, latest) for key, tp in wanted.items()}
    return {tp: state for tp, state in found.items() if state is not None}
