"""Policy code behind the wall tries every port listening on this machine.

A walled process (as a harness's tool call runs) connects to each TCP port that has a listener
on this machine while the test runs: the session broker, every other test's servers, whatever
else listens. It reaches one, the interceptor's port, relayed to it; the same probe unwalled is
the control that the ports were there to reach.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.sandbox.netns import Endpoint, Wall
from rollstream.settings import KafkaSettings
from tests.fault_table import ChaosReport
from tests.network_probe import probe_command

pytestmark = pytest.mark.integration

_LISTEN = "0A"


def listening_ports() -> set[int]:
    """Ports with a TCP listener on this machine (any address, IPv4 or IPv6)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


async def test_a_walled_process_reaches_the_interceptor_and_no_other_port(
    kafka_settings: KafkaSettings, tmp_path: Path, chaos_report: ChaosReport
) -> None:
    async def interceptor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(interceptor, "127.0.0.1", 0)
    async with server:
        relayed = server.sockets[0].getsockname()[1]
        ports = sorted(listening_ports())
        broker = int(kafka_settings.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])
        assert broker in ports and relayed in ports
        targets = {str(port): ("127.0.0.1", port) for port in ports}
        launch = HarnessLaunch(["bash", "-c", probe_command(targets)], {})
        outcomes = {}
        for name, wall in (("walled", Wall(Endpoint("127.0.0.1", relayed))), ("open", None)):
            work = tmp_path / name
            result = await run_harness(
                launch, tmp_path / f"{name}-home", work, tmp_path / f"{name}-logs", 120, wall
            )
            assert result.exit_code == 0, result.stderr_tail
            outcomes[name] = json.loads((work / "probe.json").read_text())
    reached = sorted(int(p) for p, outcome in outcomes["walled"].items() if outcome == "open")
    unwalled = [p for p, outcome in outcomes["open"].items() if outcome == "open"]
    chaos_report(
        fault="policy code connecting to every port listening on the machine, from behind the "
        "wall (tests/chaos/test_network_wall.py)",
        load=f"{len(ports)} ports, the broker among them ({len(unwalled)} reachable unwalled)",
        lost=0,
        duplicated=0,
        errors=f"{len(reached) - 1} reached besides the interceptor",
    )
    assert reached == [relayed]
    assert str(broker) in unwalled  # the control: the broker was there to be reached
