"""A transformation for the processor's tests: each PolicyVersion copied out, a count as state.

Also runs as a member process of its own (``python -m tests.kafka.echo SPEC_JSON``), so a test
can expel a member whose event loop stalls, as a long pause in a real process would.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.structs import TopicPartition

from rollstream.kafka.batches import Batch, Output, Transaction
from rollstream.kafka.processor import TransactionalProcessor
from rollstream.schemas import AvroSerializer, PolicyVersion, utcnow
from rollstream.settings import KafkaSettings


@dataclass
class Echo:
    """Copies each PolicyVersion to ``output`` as ``publisher=name``; counts them per partition."""

    output: str
    name: str
    hold_on: str = ""  # a record published by this stalls the whole event loop...
    hold_s: float = 0.0  # ...this long (heartbeats stop: the group expels the member)
    marker: Path | None = None  # written just before the stall
    cancel_on_rebalance: bool = False
    states: dict[TopicPartition, dict[str, Any]] = field(default_factory=dict)
    seen: dict[TopicPartition, tuple[dict[str, Any] | None, int | None]] = field(
        default_factory=dict
    )
    outputs: int = 0
    copied: set[int] = field(default_factory=set)  # versions whose copy committed
    pending: dict[TopicPartition, list[int]] = field(default_factory=dict)
    serializer: AvroSerializer = field(default_factory=AvroSerializer)

    def assigned(
        self, tp: TopicPartition, state: dict[str, Any] | None, committed: int | None
    ) -> None:
        self.seen[tp] = (state, committed)
        self.states[tp] = {"count": int((state or {}).get("count", 0))}

    def revoked(self, tps: Sequence[TopicPartition]) -> None:
        for tp in tps:
            self.states.pop(tp, None)

    async def transform(self, batch: Batch) -> None:
        for incoming in batch.records.values():
            for i in incoming:
                if (
                    isinstance(i.record, PolicyVersion)
                    and self.hold_on
                    and (i.record.publisher == self.hold_on)
                ):
                    if self.marker is not None:
                        self.marker.write_text("holding")
                    time.sleep(self.hold_s)  # noqa: ASYNC251 - the stall is the point

    def transactions(self, batch: Batch, result: None) -> dict[TopicPartition, Transaction]:
        out: dict[TopicPartition, Transaction] = {}
        self.pending = {}
        for tp, incoming in batch.records.items():
            if tp not in self.states:
                continue
            transaction = Transaction(offset=incoming[-1].message.offset + 1)
            for i in incoming:
                if isinstance(i.record, PolicyVersion):
                    copy = PolicyVersion(
                        version=i.record.version, published_at=utcnow(), publisher=self.name
                    )
                    value = self.serializer.encode(copy)
                    transaction.outputs.append(Output(self.output, i.message.key, value))
                    self.pending.setdefault(tp, []).append(i.record.version)
            self.states[tp]["count"] += len(transaction.outputs)
            transaction.state = dict(self.states[tp])
            out[tp] = transaction
        return out

    def committed(self, tp: TopicPartition, transaction: Transaction) -> None:
        self.outputs += len(transaction.outputs)
        self.copied.update(self.pending.pop(tp, []))


def processor(
    kafka: KafkaSettings, echo: Echo, spec: dict[str, Any]
) -> TransactionalProcessor[None]:
    """A processor for ``echo`` from a spec (topics, group, client overrides)."""
    return TransactionalProcessor[None](
        kafka,
        echo,
        input_topic=spec["input"],
        group_id=spec["group"],
        dead_letter_topic=spec["deadletters"],
        state_topic=spec["state"],
        consumer_overrides=spec.get("consumer", {}),
    )


async def _member(spec: dict[str, Any]) -> dict[str, int]:
    kafka = KafkaSettings(bootstrap_servers=spec["bootstrap"])
    echo = Echo(
        spec["output"],
        spec["name"],
        hold_on=spec.get("hold_on", ""),
        hold_s=spec.get("hold_s", 0.0),
        marker=Path(spec["marker"]) if spec.get("marker") else None,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with processor(kafka, echo, spec) as member:
        await member.run(stop)
    return {"outputs": echo.outputs, "fenced": member.metrics.fenced}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    member_spec = json.loads(sys.argv[1])
    Path(member_spec["result"]).write_text(json.dumps(asyncio.run(_member(member_spec))))
