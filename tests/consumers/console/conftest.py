"""Fixtures of the console's tests: a built-looking front end, records on a real broker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import pytest

from rollstream.consumers.console import Assets
from rollstream.schemas import AvroRecord, AvroSerializer, Scored, Trajectory
from rollstream.schemas.calls import CallRecord
from rollstream.schemas.sessions import SessionEnded, SessionStarted
from tests.conftest import ProducerFactory

Publish = Callable[[str, Iterable[AvroRecord]], Awaitable[None]]


@pytest.fixture
def stub_assets(tmp_path: Path) -> Assets:
    """A front end of two small files: the API tests need the server, not the browser's code."""
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "console.js").write_text("document.title = 'stub';\n")
    (dist / "console.css").write_text("body { margin: 0 }\n")
    return Assets(dist)


def key_of(record: AvroRecord) -> bytes:
    """The key a record is written under: session id on events, group id on trajectories."""
    if isinstance(record, Scored):
        return record.trajectory.group_id.encode()
    if isinstance(record, Trajectory):
        return record.group_id.encode()
    if isinstance(record, CallRecord | SessionStarted | SessionEnded):
        return record.session_id.encode()
    return b"x"


@pytest.fixture
async def publish(producer_factory: ProducerFactory) -> Publish:
    """Write records to a topic, as the services would."""
    producer = await producer_factory()
    serializer = AvroSerializer()

    async def send(topic: str, records: Iterable[AvroRecord]) -> None:
        for record in records:
            await producer.send_and_wait(topic, serializer.encode(record), key=key_of(record))

    return send
