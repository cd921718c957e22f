"""The broker away and the spool's disk full, then the disk space back and the broker back.

The interceptor runs as a process of its own, its spool on a 1 MiB tmpfs of the test's own, in
front of the scripted backend; the broker is the test's own too. The broker is killed (while
nothing is in flight), calls go on: their records fill the spool until the disk is full (the
rest of it taken by a filler file), then are held in memory (the spool alarm is raised). During
the fault the harnesses' calls are answered and the admin port answers /health and /metrics.
The filler is removed (the held records go to the spool), the broker restarted (the spool
drains), and more calls are made.

Counted afterwards by call id in the events topic: every call the backend served is there
(lost) and once only (duplicated: nothing was in flight when the broker died, so nothing may
come twice).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.chaos.interceptor_proc import InterceptorProcess
from tests.chaos.pipeline import counting_backend
from tests.chaos.publisher_faults import (
    Calls,
    admin,
    calls_by_id,
    kill_broker,
    own_broker,
    resent_and_differing,
    sent,
    wait_metrics,
    wait_sent,
)
from tests.fault_table import ChaosReport
from tests.producers.publisher.tiny_disk import fill, tiny_disk

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

BEFORE = 5  # calls published before the fault
SPOOLED = 10  # calls whose records reach the spool during the outage
HELD = 10  # calls made while the disk is full
AFTER = 5  # calls after the recovery


async def test_a_full_spool_disk_during_an_outage_loses_nothing_and_blocks_nothing(
    tmp_path: Path, chaos_report: ChaosReport
) -> None:
    calls = Calls()
    admin_checks = 0
    with tiny_disk(tmp_path / "disk", "1m") as disk:
        async with (
            own_broker(tmp_path, "chaos-diskfull") as (broker, kafka),
            counting_backend(tmp_path / "backend", ttft_ms=5, tpot_ms=1) as backend,
        ):
            proxy = InterceptorProcess(
                backend.url,
                kafka,
                tmp_path / "state",
                tmp_path / "interceptor.log",
                env={"ROLLSTREAM_PUBLISHER_SPOOL_DIR": str(disk / "spool")},
            )
            await proxy.start()
            try:
                await calls.chat(proxy, BEFORE, "before")
                await wait_metrics(proxy, {"rollstream_records_published_total": BEFORE})
                info = broker.running()
                assert info is not None
                await kill_broker(broker, info)  # SIGKILL, while nothing is in flight

                await calls.chat(proxy, SPOOLED, "spooled")
                await wait_metrics(proxy, {"rollstream_records_spooled_total": SPOOLED})
                filler = fill(disk)
                await calls.chat(proxy, HELD, "held")
                await wait_metrics(
                    proxy, {"rollstream_spool_alarm": 1, "rollstream_spool_held_records": 1}
                )
                for _ in range(5):  # the admin port answers throughout the fault
                    assert (await admin(proxy, "/health"))["spool_alarm"] is True
                    await admin(proxy, "/metrics")
                    admin_checks += 1
                    await asyncio.sleep(0.3)

                filler.unlink()  # the disk space back: held records go to the spool
                await wait_metrics(
                    proxy,
                    {
                        "rollstream_spool_alarm": 0,
                        "rollstream_records_spooled_total": SPOOLED + HELD,
                    },
                )
                restarted = await asyncio.to_thread(broker.start)
                assert restarted.port == info.port
                metrics = await wait_sent(proxy, BEFORE + SPOOLED + HELD)
                assert sent(metrics) == BEFORE + SPOOLED + HELD  # none twice
                await calls.chat(proxy, AFTER, "after")
                await wait_sent(proxy, BEFORE + SPOOLED + HELD + AFTER)
                admin_checks += 1
            finally:
                await proxy.stop()
            copies = await calls_by_id(kafka, backend.served.ok)
    lost = backend.served.ok - len(copies)
    resent, duplicated = resent_and_differing(copies)
    chaos_report(
        fault="broker SIGKILL and the spool's disk full (1 MiB tmpfs), then space back, "
        "then the broker back",
        load=f"{calls.made} calls: {SPOOLED} spooled, {HELD} held in memory while the disk was "
        f"full; admin port answered {admin_checks} of {admin_checks} checks; {resent} re-sent",
        lost=lost,
        duplicated=duplicated,
        errors=str(len(calls.errors) + backend.served.failed),
    )
    assert calls.errors == [] and backend.served.failed == 0
    assert backend.served.ok == calls.made == BEFORE + SPOOLED + HELD + AFTER
    assert lost == 0 and duplicated == 0 and resent == 0
