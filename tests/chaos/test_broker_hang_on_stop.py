"""A broker that stops answering without closing connections (SIGSTOP) while the interceptor
stops.

The interceptor runs as a process of its own in front of the scripted backend, publishing to a
broker of the test's own, with ``ROLLSTREAM_PUBLISHER_SEND_TIMEOUT_S`` longer than the
publisher's stop waits (10 s): the batch the sending task holds is still waiting for acks when
``stop()`` gives up on it. The broker is frozen with SIGSTOP (its sockets stay open: no reset,
no refusal), calls go on, and the interceptor gets SIGTERM. It must exit in bounded time with
every record it had recorded in its spool. The broker is then continued (SIGCONT), or killed
and restarted from its data dir, the interceptor restarted on the same state dir, and more calls
are made.

Counted afterwards by call id in the events topic: every call the backend served is there
(lost). A continued broker reads the frozen batch's request still waiting in its socket and
writes it, after the interceptor spooled that batch: those copies are counted (re-sent, at most
the batch, each identical to its first copy) and left to readers, which drop them by call id; a
call whose copies differ would be a real duplicate. A restarted broker never saw the request:
nothing may come twice.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from rollstream.producers.publisher.spool import Spool
from rollstream.schemas import AvroSerializer, CallRecord
from tests.chaos.interceptor_proc import InterceptorProcess
from tests.chaos.pipeline import counting_backend
from tests.chaos.publisher_faults import (
    Calls,
    calls_by_id,
    kill_broker,
    own_broker,
    resent_and_differing,
    signal_quietly,
    wait_metrics,
    wait_sent,
)
from tests.fault_table import ChaosReport

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

BEFORE = 5  # calls published before the broker freezes
FROZEN = 8  # calls made while it is frozen
AFTER = 5  # calls after the restart
EXIT_WITHIN_S = 45.0  # drain 2 s + the publisher's stop 10 s + closing the producer 5 s, and room


@pytest.mark.parametrize("recovery", ["SIGCONT", "restart"])
async def test_a_hung_broker_at_stop_loses_no_record(
    recovery: str, tmp_path: Path, chaos_report: ChaosReport
) -> None:
    calls = Calls()
    problems: list[str] = []
    async with (
        own_broker(tmp_path, "chaos-hang") as (broker, kafka),
        counting_backend(tmp_path / "backend", ttft_ms=5, tpot_ms=1) as backend,
    ):
        proxy = InterceptorProcess(
            backend.url,
            kafka,
            tmp_path / "state",
            tmp_path / "interceptor.log",
            options=["--drain-timeout-s", "2"],
            env={"ROLLSTREAM_PUBLISHER_SEND_TIMEOUT_S": "30"},
        )
        await proxy.start()
        info = broker.running()
        assert info is not None
        try:
            await calls.chat(proxy, BEFORE, "before")
            await wait_sent(proxy, BEFORE)

            signal_quietly(info, signal.SIGSTOP)  # connections stay open; nothing answers
            await calls.chat(proxy, FROZEN, "frozen")
            await wait_metrics(proxy, {"rollstream_calls_total": BEFORE + FROZEN})
            proxy.send(signal.SIGTERM)
            began = time.monotonic()
            try:
                await proxy.wait_exit(EXIT_WITHIN_S)
            except AssertionError:
                problems.append(f"the interceptor did not exit within {EXIT_WITHIN_S:g} s")
                proxy.send(signal.SIGKILL)
                await proxy.wait_exit(10)
            stopped_in = time.monotonic() - began
            serializer = AvroSerializer()
            spooled = [
                serializer.decode_as(r.value, CallRecord).session_id
                for r in Spool(proxy.spool_dir).read(10_000)
            ]

            if recovery == "SIGCONT":
                signal_quietly(info, signal.SIGCONT)
            else:
                await kill_broker(broker, info)  # SIGKILL
                await asyncio.to_thread(broker.start)
            await proxy.start()  # same port and state dir: it sends what was spooled
            await calls.chat(proxy, AFTER, "after")
            await wait_sent(proxy, len(spooled) + AFTER)
        finally:
            signal_quietly(info, signal.SIGCONT)
            await proxy.stop()
        copies = await calls_by_id(kafka, backend.served.ok)
    lost = backend.served.ok - len(copies)
    resent, duplicated = resent_and_differing(copies)
    chaos_report(
        fault="broker SIGSTOP (connections left open) while the interceptor stops (SIGTERM), "
        f"then the broker {'continued' if recovery == 'SIGCONT' else 'killed and restarted'}, "
        "the interceptor restarted",
        load=f"{calls.made} calls, {FROZEN} while the broker was frozen; {len(spooled)} records "
        f"spooled at stop (exit after {stopped_in:.0f} s)"
        + (
            f"; {resent} re-sent: the batch the frozen broker read on SIGCONT (identical copies, "
            "readers drop them by call id)"
            if recovery == "SIGCONT"
            else ""
        ),
        lost=lost,
        duplicated=duplicated,
        errors=str(len(calls.errors) + backend.served.failed + len(problems)),
    )
    assert calls.errors == [] and backend.served.failed == 0 and problems == []
    assert backend.served.ok == calls.made == BEFORE + FROZEN + AFTER
    assert sorted(s for s in spooled if s.startswith("frozen")) == sorted(set(spooled))
    assert len(spooled) == FROZEN  # the batch in hand and the queue behind it, each once
    assert lost == 0
    assert duplicated == 0
    assert resent <= (FROZEN if recovery == "SIGCONT" else 0)
