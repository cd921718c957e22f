"""The scale benchmark: its pure figures and verdict, and a small run end to end."""

from __future__ import annotations

import dataclasses
import resource
import subprocess
import sys
from typing import Any

import pytest

from rollstream.dev.bench import scale
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.scale import SMALL, ScaleBenchConfig, fd_plan, run_scale_bench
from rollstream.dev.bench.scale_report import (
    Call,
    Sample,
    peak_overlap,
    scale_section,
    summarise_calls,
    target_verdict,
    window_usage,
)
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings


def test_peak_overlap_counts_intervals_open_together() -> None:
    assert peak_overlap([]) == 0
    assert peak_overlap([(0, 10), (1, 2), (3, 4), (3.5, 5)]) == 3
    # A call starting the moment the previous one ended is not two calls at once.
    assert peak_overlap([(0, 1), (1, 2), (2, 3)]) == 1


def _calls() -> list[Call]:
    return [
        (0, 0, 0.0, 0.5, 2.0, ""),
        (0, 1, 2.0, 2.5, 4.0, ""),
        (1, 0, 1.0, 1.2, 3.0, ""),
        (1, 1, 3.0, 0.0, 3.1, "http_502"),
        (2, 0, 1.5, 0.0, 2.5, "ServerDisconnectedError"),
        (2, 1, 2.5, 2.6, 4.5, ""),
    ]


def test_summarise_calls() -> None:
    load = summarise_calls(_calls(), sessions=3, turns=2)
    assert load["calls"] == 6 and load["calls_expected"] == 6
    assert load["errors"] == 2 and load["calls_ok"] == 4
    assert load["errors_by_kind"] == {"http_502": 1, "ServerDisconnectedError": 1}
    assert load["sessions"] == 3 and load["sessions_completed"] == 1
    assert load["peak_sessions_open"] == 3
    assert load["peak_calls_in_flight"] == 3  # at 1.5: session 0's first, 1's and 2's
    assert load["all_open"] == [1.5, 3.1]  # the last session opened, the first one closed
    assert load["wall_s"] == 4.5 and load["calls_per_s"] == round(6 / 4.5, 1)
    assert load["ttft_p50_ms"] == 500.0  # first contents after 0.5, 0.5, 0.2, 0.1 s
    assert load["latency_p99_ms"] == 2000.0


def test_no_moment_with_every_session_open() -> None:
    load = summarise_calls([(0, 0, 0.0, 0.1, 1.0, ""), (1, 0, 2.0, 2.1, 3.0, "")], 2, 1)
    assert load["all_open"] is None and load["peak_sessions_open"] == 1


def test_window_usage_is_per_second_of_the_window() -> None:
    samples: list[Sample] = [(t, 1000, 0.5 * t, 0.25 * t) for t in (0.0, 1.0, 2.0, 3.0, 4.0)]
    usage = window_usage(samples, [1.0, 3.0])
    assert usage == {"seconds": 2.0, "cpu_utilisation": 0.5, "wait_per_s": 0.25}
    assert window_usage(samples, None) is None
    assert window_usage(samples, [1.5, 1.9]) is None  # no two samples inside


def _result(**load: Any) -> dict[str, Any]:
    result: dict[str, Any] = {
        "config": dataclasses.asdict(ScaleBenchConfig()) | {"call_s": 19.0},
        "load": {
            "sessions": 1000,
            "peak_sessions_open": 1000,
            "calls": 3000,
            "calls_expected": 3000,
            "errors": 0,
            "errors_by_kind": {},
            "calls_per_s": 40.0,
            "peak_calls_in_flight": 998,
            "ttft_p50_ms": 1010.0,
            "ttft_p99_ms": 1500.0,
            "latency_p50_ms": 19100.0,
            "latency_p99_ms": 20000.0,
        }
        | load,
        "clients": [{"cpu_utilisation": 0.2}],
        "interceptor": {
            "rss_start_mb": 160.0,
            "hwm_mb": 230.0,
            "kb_per_session": 70.0,
            "cpu_s": 30.0,
            "cpu_ms_per_call": 10.0,
            "wait_s": 1.0,
            "all_open": {"seconds": 20.0, "cpu_utilisation": 0.4, "wait_per_s": 0.01},
            "fds_peak": 2010,
            "exit_code": 0,
        },
        "backend": {"processes": 1, "cpu_utilisation": 0.3},
        "kafka": {"records": 3000, "distinct": 3000, "statuses": {"ok": 3000}},
        "fd_limits": {"soft": 1024, "hard": 20000, "needed": {"interceptor": 2512}},
    }
    result["fd_limits"]["blocked"] = False
    return result


def test_verdict_met_and_each_way_to_miss_it() -> None:
    assert target_verdict(_result()) == {"met": True, "shortfalls": []}
    misses = {
        "fewer than 1,000": _result(sessions=999, peak_sessions_open=999),
        "open at once": _result(peak_sessions_open=700),
        "errors": _result(errors=1, errors_by_kind={"http_502": 1}),
    }
    lost = _result()
    lost["kafka"]["records"] = 2999
    misses["records"] = lost
    fat = _result()
    fat["interceptor"]["hwm_mb"] = 2049.0
    misses["peak RSS"] = fat
    crashed = _result()
    crashed["interceptor"]["exit_code"] = -9
    misses["exit code"] = crashed
    for words, result in misses.items():
        verdict = target_verdict(result)
        assert not verdict["met"]
        assert any(words in s for s in verdict["shortfalls"]), (words, verdict)


def test_section_says_met_or_missed_with_the_error_kinds() -> None:
    met = _result()
    met["target"] = target_verdict(met)
    text = "\n".join(SECTIONS["scale"](met))
    assert "RSS ≤ 2 GB: met (1,000 sessions, 3,000 calls, 0 errors" in text
    assert "Errors by kind" not in text and "machine was busy" not in text
    missed = _result(errors=2, errors_by_kind={"http_502": 2})
    missed["interceptor"]["wait_s"] = 20.0
    missed["target"] = target_verdict(missed)
    text = "\n".join(scale_section(missed))
    assert "MISSED (2 errors in 3000 of 3000 calls)" in text
    assert "Errors by kind: http_502 2." in text
    assert "waited 20 s on the run queue" in text


def test_fd_plan_flags_a_hard_limit_too_low(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 1500))
    plan = fd_plan(ScaleBenchConfig(sessions=1000))
    assert plan["needed"]["interceptor"] == 2512 and plan["blocked"]
    assert not fd_plan(ScaleBenchConfig(sessions=400))["blocked"]
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, resource.RLIM_INFINITY))
    assert not fd_plan(ScaleBenchConfig(sessions=100_000))["blocked"]


NOFILE = int(resource.RLIMIT_NOFILE)


def test_children_get_the_soft_limit_raised_within_the_hard_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)

    def lowered_then_setup() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # as a stingy default would
        scale._pin_and_nofile(None, 4096)()

    soft = subprocess.run(
        [sys.executable, "-c", f"import resource; print(resource.getrlimit({NOFILE})[0])"],
        preexec_fn=lowered_then_setup,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert int(soft) == wanted


async def test_small_run(kafka_settings: KafkaSettings, rollstream_topics: TopicNames) -> None:
    lines: list[str] = []
    result = await run_scale_bench(SMALL, kafka_settings, lines.append)
    load, proxy, kafka = result["load"], result["interceptor"], result["kafka"]
    assert set(result) >= {"config", "load", "clients", "interceptor", "kafka", "target"}
    calls = SMALL.sessions * SMALL.turns
    assert load["errors"] == 0 and load["errors_by_kind"] == {}
    assert load["calls"] == load["calls_ok"] == calls
    assert load["sessions"] == load["sessions_completed"] == SMALL.sessions
    assert kafka == {"records": calls, "distinct": calls, "statuses": {"ok": calls}}
    assert load["peak_sessions_open"] == SMALL.sessions  # all at once
    assert 0 < load["ttft_p50_ms"] <= load["latency_p50_ms"]
    assert 0 < proxy["rss_start_mb"] <= proxy["hwm_mb"] < 2048
    assert proxy["cpu_ms_per_call"] > 0 and proxy["exit_code"] == 0
    assert proxy["fds_peak"] >= SMALL.sessions  # a client connection per session at least
    assert len(result["clients"]) == SMALL.clients
    # Everything but the size holds, so the verdict names only that.
    assert result["target"] == {"met": False, "shortfalls": ["50 sessions, fewer than 1,000"]}
    assert "MISSED (50 sessions, fewer than 1,000)" in "\n".join(SECTIONS["scale"](result))
    assert len(lines) == 2
