"""Partition reassignment (KIP-455) through aiokafka's admin client, which wraps none of it.

aiokafka 0.14 defines the AlterPartitionReassignments (key 45) and ListPartitionReassignments
(key 46) requests but has no admin method for them, so they go through the client's request
sending. In KRaft clients never reach the controllers: any broker takes these requests and
forwards them to the active controller, so they go to whichever node the client picks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownError, for_code
from aiokafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
)

from rollstream.errors import BrokerError
from rollstream.kafka.replication import PartitionReplicas

#: Error codes newer than aiokafka's table that these requests answer with.
_NAMES = {85: "NO_REASSIGNMENT_IN_PROGRESS"}

#: Told (partitions done, partitions awaited) whenever the first number changes.
Progress = Callable[[int, int], None]


def kafka_error(code: int, message: str | None, what: str) -> BrokerError:
    """A ``BrokerError`` naming the Kafka error (``INVALID_REPLICATION_FACTOR``...) of ``code``."""
    error = for_code(code)
    name = _NAMES.get(code, f"error {code}") if error is UnknownError else error.message
    detail = f": {message}" if message else ""
    return BrokerError(f"{what} failed: {name}{detail}", retriable=bool(error.retriable))


def _tagged(
    targets: Mapping[tuple[str, int], Sequence[int]],
) -> list[tuple[str, list[tuple[int, list[int], dict[int, bytes]]], dict[int, bytes]]]:
    by_topic: dict[str, list[tuple[int, list[int], dict[int, bytes]]]] = {}
    for (topic, partition), replicas in sorted(targets.items()):
        by_topic.setdefault(topic, []).append((partition, list(replicas), {}))
    return [(topic, partitions, {}) for topic, partitions in by_topic.items()]


async def alter_reassignments(
    admin: AIOKafkaAdminClient,
    targets: Mapping[tuple[str, int], Sequence[int]],
    timeout_ms: int = 30_000,
) -> None:
    """Ask the controller to move each (topic, partition) of ``targets`` to its replica list.

    One request for all of them; the controller answers once the reassignments are recorded,
    not when the new replicas have caught up (see :func:`wait_reassigned`). Any partition the
    controller refuses raises ``BrokerError`` naming them all (the others still move).
    """
    if not targets:
        return
    request = AlterPartitionReassignmentsRequest(timeout_ms, _tagged(targets), {})
    response = (await admin._send_request(request)).to_object()
    if response["error_code"]:
        raise kafka_error(
            response["error_code"], response["error_message"], "reassigning partitions"
        )
    errors = [
        kafka_error(
            p["error_code"], p["error_message"], f"reassigning {t['name']}-{p['partition_index']}"
        )
        for t in response["responses"]
        for p in t["partitions"]
        if p["error_code"]
    ]
    if errors:
        raise BrokerError(
            "; ".join(str(e) for e in errors), retriable=all(e.retriable for e in errors)
        )


async def ongoing_reassignments(
    admin: AIOKafkaAdminClient, timeout_ms: int = 30_000
) -> dict[tuple[str, int], tuple[int, ...]]:
    """Every reassignment under way in the cluster: (topic, partition) -> replicas being added."""
    request = ListPartitionReassignmentsRequest(timeout_ms, None, {})  # None: every partition
    response = (await admin._send_request(request)).to_object()
    if response["error_code"]:
        raise kafka_error(
            response["error_code"], response["error_message"], "listing reassignments"
        )
    return {
        (t["name"], p["partition_index"]): tuple(p["adding_replicas"])
        for t in response["topics"]
        for p in t["partitions"]
    }


async def cluster_topics(
    admin: AIOKafkaAdminClient, names: list[str], patience: float = 2.0, *, only: bool = False
) -> list[dict[str, Any]]:
    """Metadata (``describe_topics``) of every topic in the cluster, or ``only`` of ``names``.

    Each broker applies the cluster's metadata on its own, so a topic created a moment ago may
    not be known yet (or have no leader yet) on the broker asked: a name missing is asked
    again for ``patience`` seconds before it counts as missing (``BrokerError``).
    """
    deadline = time.monotonic() + patience
    while True:
        metadata: list[dict[str, Any]] = await admin.describe_topics(names if only else None)
        known = {t["topic"] for t in metadata if t["error_code"] == 0}
        missing = [n for n in names if n not in known]
        if not missing:
            return metadata
        if time.monotonic() >= deadline:
            raise BrokerError(f"no such topic: {', '.join(missing)}", retriable=False)
        await asyncio.sleep(0.2)


def partitions_of(
    metadata: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, int], PartitionReplicas]:
    """Each partition of ``describe_topics``'s answer with its leader, replicas and ISR."""
    return {
        (t["topic"], p["partition"]): PartitionReplicas(
            t["topic"], p["partition"], p["leader"], tuple(p["replicas"]), tuple(p["isr"])
        )
        for t in metadata
        for p in t["partitions"]
    }


async def wait_reassigned(
    admin: AIOKafkaAdminClient,
    targets: Mapping[tuple[str, int], Sequence[int]],
    timeout: float,
    progress: Progress | None = None,
    poll: float = 0.5,
) -> dict[tuple[str, int], PartitionReplicas]:
    """Poll until every partition of ``targets`` has its target replicas, all in sync.

    Done for a partition means the controller no longer lists its reassignment and the
    metadata shows the target replicas, every one in the ISR: the controller drops the
    reassignment a moment before every broker's metadata shows the grown ISR, and producers
    read the latter. Calls ``progress(done, total)`` whenever the count changes; returns the
    last metadata seen of the targets' topics, done or not when ``timeout`` (seconds) ran out.
    """
    topics = sorted({topic for topic, _ in targets})
    deadline = time.monotonic() + timeout
    reported = -1
    while True:
        ongoing = await ongoing_reassignments(admin)
        states = partitions_of(await admin.describe_topics(topics))
        done = sum(
            1
            for key, target in targets.items()
            if key not in ongoing
            and key in states
            and set(states[key].replicas) == set(target)
            and set(states[key].isr) >= set(target)
        )
        if progress is not None and done != reported:
            progress(done, len(targets))
            reported = done
        if done == len(targets) or time.monotonic() >= deadline:
            return states
        await asyncio.sleep(poll)
