"""The publisher benchmark runs at tiny sizes against the real broker and reports both parts."""

from __future__ import annotations

import pytest

from rollstream.dev.bench.logdirs import topic_log_bytes
from rollstream.dev.bench.publisher import PublisherBenchConfig, run_publisher_bench
from rollstream.dev.bench.report import SECTIONS
from rollstream.kafka.admin import TopicAdmin
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory, TopicFactory

pytestmark = pytest.mark.integration


async def test_log_bytes_are_the_stored_batches(
    kafka_settings: KafkaSettings, topic_factory: TopicFactory, producer_factory: ProducerFactory
) -> None:
    topic = await topic_factory(partitions=2)
    assert await topic_log_bytes(kafka_settings, topic, 2) == 0
    producer = await producer_factory(compression_type=None)
    values = [bytes([i]) * 1000 for i in range(20)]
    for i, value in enumerate(values):
        await (await producer.send(topic, value, key=str(i).encode()))
    stored = await topic_log_bytes(kafka_settings, topic, 2)
    # Uncompressed: every value, plus each batch's header and each record's framing.
    assert sum(map(len, values)) < stored < sum(map(len, values)) + 20 * 200
    assert await topic_log_bytes(kafka_settings, f"{topic}-absent", 1) == 0


async def test_small_run(kafka_settings: KafkaSettings) -> None:
    config = PublisherBenchConfig(
        records=50,
        sessions=4,
        turns=3,
        system_tokens=300,
        tool_result_tokens=20,
        completion_tokens=10,
        rounds=2,
        partitions=2,
        session_turns=5,
        session_system_tokens=400,
        session_tool_result_tokens=30,
        session_completion_tokens=10,
    )
    lines: list[str] = []
    result = await run_publisher_bench(config, kafka_settings, lines.append)

    tp = result["throughput"]
    assert (tp["prompt_tokens_first"], tp["prompt_tokens_last"]) == (300, 360)
    assert tp["prompt_tokens_mean"] == 330
    by_tp = {e["encoding"]: e for e in tp["encodings"]}
    assert list(by_tp) == ["naive", "delta", "delta_with_request"]
    for e in by_tp.values():
        low, high = e["records_per_s_range"]
        assert 0 < low <= e["records_per_s"] <= high
        assert (e["records"], e["lost"], e["spooled"], e["dropped"]) == (50, 0, 0, 0)
        assert e["cpu_us_per_record"] > 0 and e["log_bytes_per_record"] > 0
    assert by_tp["naive"]["value_bytes_per_record"] > by_tp["delta"]["value_bytes_per_record"]
    assert (
        by_tp["delta_with_request"]["value_bytes_per_record"]
        > by_tp["delta"]["value_bytes_per_record"]
    )
    assert sum(line.startswith("  round ") for line in lines) == 6

    session = result["session"]
    assert session["final_tokens"] == 400 + 4 * 40 + 10
    assert session["bound_bytes"] == 2 * 4 * session["final_tokens"]
    by_session = {e["encoding"]: e for e in session["encodings"]}
    assert all(e["records"] == 7 for e in by_session.values())  # started, 5 calls, ended
    assert by_session["naive"]["log_bytes"] > by_session["delta"]["log_bytes"] > 0
    delta = by_session["delta"]
    assert delta["x_final_tokens_x4"] == round(
        delta["log_bytes"] / (4 * session["final_tokens"]), 3
    )
    assert result["publisher_settings"]["batch_records"] > 0

    async with TopicAdmin(kafka_settings) as admin:  # every measured topic was dropped
        assert not [
            t for t in await admin.list_topics() if t.startswith(kafka_settings.topic_prefix)
        ]
    text = "\n".join(SECTIONS["publisher"](result))
    assert "Target ≥ 2,000 CallRecords/s from one publisher" in text
    assert "| delta_with_request | delta + the harness's request" in text
