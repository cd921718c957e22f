"""The node's dead letters when the broker refuses them: logged, retried later, never a stall."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka.structs import ConsumerRecord

from rollstream.capture.node.service import Node
from rollstream.capture.node.settings import NodeSettings
from rollstream.errors import SerializationError
from rollstream.host import free_port
from rollstream.settings import KafkaSettings, StatePaths


def _poison(offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="rollstream.tasks",
        partition=0,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=b"t",
        value=b"\x00 not a task",
        checksum=None,
        serialized_key_size=1,
        serialized_value_size=12,
        headers=(),
    )


async def test_a_broker_refusing_dead_letters_costs_one_attempt_then_a_back_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    node = Node(
        NodeSettings(port=0, node_id="letters", work_root=tmp_path / "work"),
        nowhere,
        paths=StatePaths(state_dir=tmp_path / "state"),
    )
    began = time.monotonic()
    async with asyncio.timeout(30):
        await node.intake._dead_letter(_poison(1), SerializationError("bad"))
        first = time.monotonic() - began
        await node.intake._dead_letter(_poison(2), SerializationError("bad"))
    assert time.monotonic() - began - first < 0.5  # the second does not try again
    assert node.intake._letters is None  # a producer that never started is not kept
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not dead-letter rollstream.tasks@1" in m for m in messages), messages
    assert any("not dead-lettered (retrying later): rollstream.tasks@2" in m for m in messages)
