"""The pipeline benchmark runs both services at tiny sizes against the real broker."""

from __future__ import annotations

import pytest

from rollstream.dev.bench.pipeline import PipelineBenchConfig, run_pipeline_bench
from rollstream.dev.bench.report import SECTIONS
from rollstream.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_small_run(kafka_settings: KafkaSettings) -> None:
    config = PipelineBenchConfig(
        sessions=10,
        pool=2,
        calls=3,
        system_tokens=100,
        tool_result_tokens=10,
        completion_tokens=5,
        rate=5.0,
        duration_s=1.0,
        e2e_pool=2,
        e2e_calls=2,
        e2e_system_tokens=50,
        e2e_tool_result_tokens=5,
        e2e_completion_tokens=5,
        session_spread_s=0.2,
        partitions=2,
        # Small batches: several output transactions, so the rates have something to measure.
        reconstructor_batch_records=5,
        scorer_batch_records=2,
        timeout_s=120.0,
    )
    lines: list[str] = []
    result = await run_pipeline_bench(config, kafka_settings, lines.append)
    assert result["services"] == "subprocesses"

    rec = result["reconstructor"]
    assert (rec["sessions"], rec["calls"], rec["prompt_tokens_last"]) == (10, 30, 130)
    assert rec["statuses"] == {"complete": 10} and rec["duplicates"] == 0
    assert 0 < rec["measured"] < 30 and rec["per_s"] > 0 and rec["span_s"] > 0
    assert rec["rss_mb"] > 0 and rec["cpu_ms_per_unit"] > 0 and rec["per_core_s"] > 0
    assert rec["cpu_wait_share"] >= 0 and rec["cpu_utilisation"] > 0

    score = result["scorer"]
    assert score["rewards"] == {"1.0": 10} and score["duplicates"] == 0
    assert 0 < score["measured"] < 10 and score["per_s"] > 0

    e2e = result["end_to_end"]
    assert (e2e["sessions"], e2e["scored"], e2e["missing"], e2e["duplicates"]) == (5, 5, 0, 0)
    assert 0 < e2e["latency_p50_ms"] <= e2e["latency_p90_ms"] <= e2e["latency_p99_ms"]
    assert e2e["latency_p99_ms"] <= e2e["latency_max_ms"]
    # A session's trajectory is readable before its score, so every order statistic is too.
    assert 0 < e2e["trajectory_p50_ms"] <= e2e["latency_p50_ms"]
    assert e2e["trajectory_p99_ms"] <= e2e["latency_p99_ms"]
    assert e2e["rate_achieved"] > 0

    text = "\n".join(SECTIONS["pipeline"](result))
    assert "Target reconstructor ≥ 1,000 calls/s through Kafka" in text
    assert "Target end-to-end p99 ≤ 2 s" in text
