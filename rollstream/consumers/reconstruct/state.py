"""The reconstructor's per-partition state on the compacted state topic.

Each transaction that emits trajectories also writes, for every input partition it touched,
the partition's commit offset and the sessions emitted at or past it (``PartitionBuffers.state``).
A new owner of the partition reads the last such record before consuming, so re-reading from
the committed offset never emits a session twice. The records are JSON: internal, versioned,
read only by this module.
"""

from __future__ import annotations

import json
from typing import Any

from aiokafka.structs import TopicPartition

from rollstream.clients import make_consumer
from rollstream.consumers.reconstruct.events import iter_records
from rollstream.errors import ConfigurationError
from rollstream.settings import KafkaSettings


def state_key(group_id: str, tp: TopicPartition) -> bytes:
    """The compaction key of one input partition's state for one consumer group."""
    return f"{group_id}/{tp.topic}/{tp.partition}".encode()


def encode_state(state: dict[str, Any]) -> bytes:
    """The state record's value."""
    return json.dumps(state, separators=(",", ":"), sort_keys=True).encode()


async def load_states(
    kafka: KafkaSettings, state_topic: str, group_id: str, tps: list[TopicPartition]
) -> dict[TopicPartition, dict[str, Any]]:
    """The last committed state of each of ``tps`` (absent: never written)."""
    wanted = {state_key(group_id, tp): tp for tp in tps}
    found: dict[TopicPartition, dict[str, Any]] = {}
    consumer = make_consumer(kafka)  # read_committed: only states of committed transactions
    await consumer.start()
    try:
        async for message in iter_records(consumer, state_topic):
            tp = wanted.get(message.key or b"")
            if tp is not None and message.value is not None:
                found[tp] = json.loads(message.value)
    except ConfigurationError:
        pass  # no state topic yet: nothing was ever emitted
    finally:
        await consumer.stop()
    return found
