"""The outage benchmark: a short outage on brokers of its own, both disk modes, nothing lost."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rollstream.dev.bench.outage import OutageBenchConfig, run_outage_bench
from rollstream.dev.bench.report import SECTIONS
from rollstream.producers.publisher.backlog import DiskThread


def test_inline_disk_work_runs_on_the_callers_thread_and_reports_its_outcome() -> None:
    disk = DiskThread(inline=True)
    assert disk.submit(threading.get_ident).result() == threading.get_ident()
    failed = disk.submit(int, "not a number")
    assert isinstance(failed.exception(), ValueError)
    disk.close()


@pytest.mark.integration
async def test_a_short_outage_in_both_modes_loses_nothing() -> None:
    config = OutageBenchConfig(outage_s=3, rate=40, record_bytes=2048, drain_timeout_s=240)
    lines: list[str] = []
    result: dict[str, Any] = await run_outage_bench(config, lines.append)

    assert [v["variant"] for v in result["variants"]] == ["inline", "thread"]
    assert sorted(result["order"]) == ["inline", "thread"]
    for v in result["variants"]:
        # Everything published reached the broker, most of it through the spool.
        assert v["lost"] == 0 and v["acknowledged"] == v["records"] > 0
        assert 0 < v["spooled"] <= v["records"]
        assert v["outage"]["samples"] > 0 and v["drain"]["samples"] > 0
        assert v["outage"]["p50_ms"] <= v["outage"]["p99_ms"] <= v["outage"]["max_ms"]
    text = "\n".join(SECTIONS["outage"](result))
    assert "| inline | outage |" in text and "| thread | drain |" in text
    assert any("broker back" in line for line in lines)
