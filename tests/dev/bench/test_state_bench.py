"""The state benchmark: the simulated partition's states, and a small run on the real broker."""

from __future__ import annotations

from typing import Any

import pytest

from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.state import StateBenchConfig, run_state_bench, states
from rollstream.dev.bench.suite import ORDER
from rollstream.settings import KafkaSettings

SMALL = StateBenchConfig(
    calls_per_s=60,
    sessions_open=40,
    calls_per_session=6,
    transactions_per_s=4,
    seconds=6,
    stuck_s=30,
    partitions=2,
)


def test_the_simulated_state_holds_the_sessions_ended_since_the_oldest_open_one() -> None:
    ended_per_s = SMALL.calls_per_s / SMALL.calls_per_session  # 10 a second
    lasts_s = SMALL.sessions_open / ended_per_s  # 4 s each
    typical = list(states(SMALL, stuck=False))
    assert len(typical) == SMALL.seconds * SMALL.transactions_per_s
    # Steady: the sessions ended within the last lifetime (the oldest open began then).
    assert {len(s["emitted"]) for s in typical} <= {
        ended_per_s * lasts_s,
        ended_per_s * lasts_s + 1,
    }
    assert all(min(s["emitted"].values()) >= s["committed"] for s in typical)
    stuck = list(states(SMALL, stuck=True))
    # Held back: the map only grows, by the sessions ended meanwhile.
    sizes = [len(s["emitted"]) for s in stuck]
    assert sizes == sorted(sizes) and sizes[-1] - sizes[0] >= ended_per_s * (SMALL.seconds - 1)
    assert len({s["committed"] for s in stuck}) == 1


@pytest.mark.integration
async def test_small_run(kafka_settings: KafkaSettings) -> None:
    lines: list[str] = []
    result: dict[str, Any] = await run_state_bench(SMALL, kafka_settings, lines.append)
    volume = {v["case"]: v for v in result["volume"]}
    for case in ("typical", "stuck"):
        assert volume[case]["changes_bytes_per_s"] < volume[case]["whole_bytes_per_s"]
    assert volume["stuck"]["entries"] > volume["typical"]["entries"]
    whole, changes = result["assignment"]
    # Both layouts read back the same state; the changes wrote less.
    assert whole["entries"] == changes["entries"] == volume["typical"]["entries"]
    assert changes["written_mb"] < whole["written_mb"]
    assert "state" in ORDER
    assert "## The reconstructor's state topic" in "\n".join(SECTIONS["state"](result))
