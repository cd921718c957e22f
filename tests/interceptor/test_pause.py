"""The admin port's pause: it holds new calls until resumed, unless the client asked for a lease.

The event loop's clock is moved forward (a day, or past a lease) rather than waited for: what
is checked is which timers the gate leaves, not how fast anything runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.admin import AdminApp
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.settings import KafkaSettings
from tests.interceptor.published import Published

DAY_S = 24 * 3600.0


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], RollstreamAddon]]:
    addon = RollstreamAddon(InterceptorSettings(), Published())
    publisher = CapturePublisher(KafkaSettings(), PublisherSettings(), "events", tmp_path)
    async with TestClient(TestServer(AdminApp(addon, publisher).app())) as client:
        yield client, addon


@contextlib.contextmanager
def _clock_ahead(seconds: float) -> Iterator[None]:
    """The running loop's clock ``seconds`` ahead: timers due by then run at its next turn."""
    loop = asyncio.get_running_loop()
    real = loop.time
    loop.time = lambda: real() + seconds  # type: ignore[method-assign]
    try:
        yield
    finally:
        del loop.time  # the class's own again


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_pause_holds_until_resumed_however_long(
    admin: tuple[TestClient[Any, Any], RollstreamAddon],
) -> None:
    client, addon = admin
    answer = await (await client.post("/admin/pause", json={"drain_timeout_s": 1})).json()
    assert answer == {"paused": True, "in_flight": 0, "drained": True, "lease_s": None}
    held = asyncio.create_task(addon.gate.wait())
    with _clock_ahead(DAY_S):  # a weight sync that takes a day, say
        await _turns()
        assert addon.gate.paused and not held.done()
    assert (await (await client.get("/health")).json())["paused"] is True
    assert (await client.post("/admin/resume")).status == 200
    await asyncio.wait_for(held, 5)
    assert not addon.gate.paused


async def test_a_lease_asked_for_ends_the_pause_logged_and_counted(
    admin: tuple[TestClient[Any, Any], RollstreamAddon], caplog: pytest.LogCaptureFixture
) -> None:
    client, addon = admin
    answer = await (await client.post("/admin/pause", json={"lease_s": 30})).json()
    assert answer["paused"] is True and answer["lease_s"] == 30
    held = asyncio.create_task(addon.gate.wait())
    with _clock_ahead(20):
        await _turns()
        assert not held.done()  # within the lease
    with caplog.at_level(logging.WARNING), _clock_ahead(31):
        await _turns()
        await asyncio.wait_for(held, 5)
    assert not addon.gate.paused and addon.gate.leases_expired == 1
    assert any("lease ran out" in r.getMessage() for r in caplog.records)
    metrics = await (await client.get("/metrics")).text()
    assert "rollstream_pause_leases_expired_total 1" in metrics


async def test_a_new_pause_without_a_lease_replaces_one_with_a_lease(
    admin: tuple[TestClient[Any, Any], RollstreamAddon],
) -> None:
    client, addon = admin
    await client.post("/admin/pause", json={"lease_s": 5})
    await client.post("/admin/pause", json={})
    with _clock_ahead(DAY_S):
        await _turns()
        assert addon.gate.paused and addon.gate.leases_expired == 0


@pytest.mark.parametrize(
    "body",
    [{"timeout_s": 30}, {"lease_s": 0}, {"lease_s": -1}, {"lease_s": "5"}, {"lease_s": True}],
)
async def test_a_pause_the_gate_cannot_honour_is_refused_and_pauses_nothing(
    admin: tuple[TestClient[Any, Any], RollstreamAddon], body: dict[str, Any]
) -> None:
    client, addon = admin
    response = await client.post("/admin/pause", json=body)
    assert response.status == 400 and "error" in await response.json()
    assert not addon.gate.paused
