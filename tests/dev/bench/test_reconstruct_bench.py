"""The reconstruction benchmark runs end to end at tiny sizes and reports both parts."""

from __future__ import annotations

import pytest

from rollstream.dev.bench.reconstruct import ReconstructBenchConfig, run_reconstruct_bench
from rollstream.dev.bench.report import SECTIONS
from rollstream.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_small_run(kafka_settings: KafkaSettings) -> None:
    config = ReconstructBenchConfig(
        sessions=2,
        calls=6,
        system_tokens=200,
        tool_result_tokens=20,
        completion_tokens=5,
        rounds=2,
        rate=10,
        duration_s=1.0,
        e2e_calls=2,
        e2e_system_tokens=50,
        session_spread_s=0.2,
        partitions=2,
    )
    lines: list[str] = []
    result = await run_reconstruct_bench(config, kafka_settings, lines.append)

    throughput = result["throughput"]
    assert throughput["prompt_tokens_last"] == 200 + 5 * 25
    assert [s["strategy"] for s in throughput["strategies"]] == ["prefix_merge", "tree"]
    for s in throughput["strategies"]:
        assert s["calls_per_s"] > 0 and s["segments_per_session"] == 1.0
        low, high = s["calls_per_s_range"]
        assert 0 < low <= s["calls_per_s"] <= high
        assert set(s["ms_per_call"]) == {"decode", "buffer", "build", "encode"}
        assert all(v > 0 for v in s["ms_per_call"].values())

    e2e = result["end_to_end"]
    assert (e2e["sessions"], e2e["trajectories"], e2e["missing"]) == (10, 10, 0)
    assert e2e["statuses"] == {"complete": 10}
    assert 0 < e2e["latency_p50_ms"] <= e2e["latency_p99_ms"] <= e2e["latency_max_ms"]
    assert e2e["rate_achieved"] > 0 and e2e["service_cpu_utilisation"] > 0
    assert e2e["service_rss_mb"] > 0

    text = "\n".join(SECTIONS["reconstruct"](result))
    assert "Target ≥ 1,000 calls/s per process" in text
    assert "MISSED" in text  # 10 sessions/s is not the 100 of the target
    no_e2e = await run_reconstruct_bench(config, None, lines.append)
    assert "end_to_end" not in no_e2e
    assert "End to end through Kafka: not run." in SECTIONS["reconstruct"](no_e2e)
