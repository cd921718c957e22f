"""The publisher and pipeline sections of RESULTS.md compute their verdicts from the numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rollstream.dev.bench.pipeline import pipeline_section
from rollstream.dev.bench.publisher_report import publisher_section
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.results_file import write_markdown
from rollstream.dev.bench.suite import header_lines, record_run


def _publisher_result(rate: int, delta_bytes: int, request_bytes: int) -> dict[str, Any]:
    encoding = {
        "records_per_s_range": [rate - 10, rate + 10],
        "mb_per_s": 1.0,
        "cpu_us_per_record": 50.0,
        "value_bytes_per_record": 3000,
        "log_bytes_per_record": 2000,
        "lost": 0,
        "spooled": 0,
    }
    return {
        "config": {"partitions": 3, "rounds": 3},
        "publisher_settings": {"batch_records": 500, "linger_ms": 20.0},
        "throughput": {
            "records": 100,
            "turns": 11,
            "sessions": 64,
            "prompt_tokens_first": 7000,
            "prompt_tokens_last": 9000,
            "prompt_tokens_mean": 8000.0,
            "encodings": [
                encoding | {"encoding": "naive", "records_per_s": rate // 3},
                encoding | {"encoding": "delta", "records_per_s": rate},
            ],
        },
        "session": {
            "turns": 50,
            "prompt_tokens_first": 8000,
            "prompt_tokens_last": 32010,
            "final_tokens": 32050,
            "bound_bytes": 256_400,
            "encodings": [
                {"encoding": e, "records": 52, "value_bytes": 1, "log_bytes": b}
                | {"x_final_tokens_x4": round(b / 128_200, 3)}
                for e, b in (
                    ("naive", 2_000_000),
                    ("delta", delta_bytes),
                    ("delta_with_request", request_bytes),
                )
            ],
        },
    }


def test_publisher_verdicts() -> None:
    text = "\n".join(publisher_section(_publisher_result(2000, 256_400, 2_564_000)))
    assert "Target ≥ 2,000 CallRecords/s from one publisher" in text
    assert "8,000-token prompts on average): met (2,000/s, 0 lost)" in text
    assert "= 256,400 bytes on the broker: met (delta: 256,400 bytes, 2.0 x" in text
    assert "naive: 2,000,000 bytes, 7.8 x the delta encoding's" in text
    assert "(10.00 x the bound), 10.0 x the bound: MISSED" in text

    text = "\n".join(publisher_section(_publisher_result(1999, 256_401, 200_000)))
    assert "on average): MISSED (1,999/s" in text
    assert "on the broker: MISSED (delta: 256,401 bytes" in text
    assert "within the bound as well" in text


def _pipeline_result(rate: int | None, p99: float | None, missing: int) -> dict[str, Any]:
    service = {"measured": 10, "span_s": 1.0, "cpu_utilisation": 0.5, "rss_mb": 100.0}
    service |= {"cpu_wait_share": 0.25, "per_core_s": 20}
    return {
        "config": {
            "strategy": "prefix_merge",
            "evaluator": "session_completed",
            "partitions": 3,
            "calls": 50,
            "reconstructor_batch_records": 2000,
            "scorer_batch_records": 32,
            "session_spread_s": 2.0,
        },
        "services": "subprocesses",
        "reconstructor": service
        | {"sessions": 10, "prompt_tokens_last": 32010, "per_s": rate, "cpu_ms_per_unit": 0.2}
        | {"statuses": {"complete": 10}, "duplicates": 0},
        "scorer": service
        | {"trajectories": 10, "per_s": 100, "cpu_ms_per_unit": 3.0}
        | {"rewards": {"1.0": 10}, "duplicates": 0},
        "end_to_end": {
            "sessions": 20,
            "calls_per_session": 10,
            "prompt_tokens_last": 4250,
            "rate_target": 20.0,
            "rate_achieved": 19.9,
            "scored": 20 - missing,
            "missing": missing,
            "duplicates": 0,
            "latency_p50_ms": 100.0,
            "latency_p90_ms": 150.0,
            "latency_p99_ms": p99,
            "latency_max_ms": p99,
            "trajectory_p50_ms": 50.0,
            "trajectory_p99_ms": 80.0,
            "reconstructor_cpu_utilisation": 0.1,
            "scorer_cpu_utilisation": 0.05,
        },
    }


def test_pipeline_verdicts() -> None:
    text = "\n".join(pipeline_section(_pipeline_result(1000, 2000.0, 0)))
    assert (
        "Target reconstructor ≥ 1,000 calls/s through Kafka: met (1,000 calls/s, the service "
        "using 50% of a core and waiting for one 25% of the time; 20 calls/s per core" in text
    )
    assert "| 50% / 25% | 0.2 per call | 20 calls/s |" in text
    assert "(SessionEnded → Scored readable): met (p99 2,000.0 ms" in text
    assert "run as subprocesses" in text

    text = "\n".join(pipeline_section(_pipeline_result(999, 2000.1, 0)))
    assert "through Kafka: MISSED (999 calls/s" in text
    assert "Scored readable): MISSED (p99 2,000.1 ms" in text
    # A p99 over the sessions that did arrive says nothing of those that did not.
    assert "readable): MISSED (p99 100.0 ms at 19.9 sessions/s, 1 missing)" in "\n".join(
        pipeline_section(_pipeline_result(1000, 100.0, 1))
    )
    # No rate (one transaction held everything) is reported, not failed on.
    assert "through Kafka: MISSED (n/a, the service" in "\n".join(
        pipeline_section(_pipeline_result(None, None, 20))
    )


def test_registered_and_written_under_the_machine_header(tmp_path: Path) -> None:
    assert SECTIONS["publisher"] is publisher_section
    assert SECTIONS["pipeline"] is pipeline_section
    results = tmp_path / "results.json"
    assert header_lines({}) == []
    data = record_run(results, ["publisher"], ["pipeline"], 90.0)
    data["benchmarks"] = {
        "publisher": _publisher_result(3000, 100_000, 2_000_000) | {"machine": data["all"]},
        "pipeline": _pipeline_result(2000, 300.0, 0),
    }
    markdown = tmp_path / "RESULTS.md"
    write_markdown(data, markdown)
    text = markdown.read_text()
    header = text.split("## ", 1)[0]
    assert "Machine: " in header and f"{data['all']['cores']} cores" in header
    assert "ran publisher one after another" in header and "(1.5 min)" in header
    assert "Failed (sections left from earlier runs): pipeline." in header
    assert text.index("## Pipeline through Kafka") < text.index("## Capture publisher")
