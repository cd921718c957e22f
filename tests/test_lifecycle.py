"""Services stop cleanly on SIGTERM/SIGINT (die on the second) and say where they listen."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rollstream.lifecycle import LISTENING, announce, announced

SERVICE = textwrap.dedent(
    """
    import asyncio, sys
    from rollstream.lifecycle import StopSignal, run_service

    async def main(stop: StopSignal) -> str:
        print("ready", flush=True)
        if sys.argv[1] == "obedient":
            await stop.event.wait()
            return "stopped cleanly"
        while True:  # ignores the stop request
            await asyncio.sleep(0.05)

    print(run_service(main), flush=True)
    """
)


def _start(mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVICE, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sigterm_stops_the_service_cleanly() -> None:
    proc = _start("obedient")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert out.strip() == "stopped cleanly"


def test_second_sigint_kills() -> None:
    proc = _start("stubborn")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None  # the first one only asked
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 128 + signal.SIGINT


def test_an_announcement_is_read_back_from_a_service_s_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    announce(interceptor="http://127.0.0.1:41000", admin="http://127.0.0.1:41001")
    err = capsys.readouterr().err
    assert err.startswith(LISTENING)
    text = "starting\nrollstream listening: x=1\n" + err + "more output\n"
    assert announced(text) == {
        "x": "1",
        "interceptor": "http://127.0.0.1:41000",
        "admin": "http://127.0.0.1:41001",
    }
    assert announced("starting, not yet listening\n") == {}
