"""The interceptor benchmark runs end to end at tiny sizes and reports all three paths."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rollstream.dev.bench.interceptor import MODES, InterceptorBenchConfig, run_interceptor_bench
from rollstream.dev.bench.report import SECTIONS
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings
from tests.engine_servers import EngineServers

pytestmark = pytest.mark.integration

SMALL = InterceptorBenchConfig(
    prompt_tokens=500,
    calls=3,
    call_concurrency=2,
    streams=3,
    stream_tokens=4,
    tpot_ms=1,
    ttft_ms=1,
    rounds=2,
    idle_s=0.5,
)


async def test_small_run(kafka_settings: KafkaSettings, rollstream_topics: TopicNames) -> None:
    config = SMALL
    lines: list[str] = []
    result = await run_interceptor_bench(
        config, kafka_settings.bootstrap_servers, kafka_settings.topic_prefix, lines.append
    )
    assert [m["mode"] for m in result["modes"]] == list(MODES)
    assert all(m["errors"] == 0 for m in result["modes"])
    assert result["prompt_tokens_measured"] > 400
    direct = result["modes"][0]
    assert direct["proxy_cpu_ms_per_call"] == 0.0
    assert result["modes"][2]["proxy_cpu_ms_per_call"] > 0
    # Idle: nothing measured for the direct path; a proxy's idle CPU is a rate, far below a
    # core (an interceptor polling in a tight loop would show up here).
    assert direct["proxy_idle_cpu_ms_per_s"] == 0.0
    assert all(0 <= m["proxy_idle_cpu_ms_per_s"] < 200 for m in result["modes"][1:])
    assert len(lines) == 1 + 2 * 3  # own per-call work, then each path in each round
    # Each round in the reverse order of the one before (ABBA), as the section says.
    assert [line.split()[2].rstrip(":") for line in lines[1:]] == [*MODES, *MODES[::-1]]
    assert "alternating the paths' order (ABBA)" in "\n".join(SECTIONS["interceptor"](result))
    assert all(m["rounds"] == 2 and m["calls"] == 6 for m in result["modes"])
    low, high = result["cpu_ratio_range"]
    assert low <= result["cpu_ratio_vs_mitmproxy"] <= high
    costs = result["own_work_ms_per_call"]
    assert set(costs) == {"request", "stream", "record", "avro", "total"}
    assert all(v > 0 for v in costs.values())
    assert costs["total"] >= max(v for k, v in costs.items() if k != "total")
    assert "Profile of rollstream's share" in "\n".join(SECTIONS["interceptor"](result))


@pytest.mark.parametrize("family", ["qwen3"])
async def test_the_three_paths_reach_a_real_vllm(
    family: str,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
) -> None:
    """Against vLLM (its own latency and its streaming, a thinking model's first tokens being
    reasoning): every path answers, the proxies' CPU is measured, the section says what served."""
    server = engine_servers.get(family)  # the engine group's, serving its own model name
    config = replace(SMALL, rounds=1, engine="vllm", model=server.model)
    lines: list[str] = []
    result = await run_interceptor_bench(
        config,
        kafka_settings.bootstrap_servers,
        kafka_settings.topic_prefix,
        lines.append,
        upstream=server.url,
    )
    modes = result["modes"]
    assert [m["errors"] for m in modes] == [0, 0, 0]
    # A TTFT from every path: a first token was seen in vLLM's chunks (NaN would be none).
    assert all(m["ttft_p50_ms"] > 0 for m in modes), modes
    assert modes[0]["proxy_cpu_ms_per_call"] == 0.0 < modes[2]["proxy_cpu_ms_per_call"]
    assert result["prompt_tokens_measured"] > 400 and result["engine"] == "vllm"
    text = "\n".join(SECTIONS["interceptor-vllm"](result))
    assert text.startswith("## Interceptor in front of vLLM")
    assert "a real vLLM serving qwen3's tiny model" in text and "backend latency" not in text
