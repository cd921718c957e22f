"""The stream benchmark: its figures, ratios, verdicts and section, and a tiny run end to end."""

from __future__ import annotations

import cProfile
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import click
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rollstream.cli import cli
from rollstream.dev.bench.report import SECTIONS
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.dev.bench.stream import SMALL, run_stream_bench
from rollstream.dev.bench.stream_load import (
    StreamFailed,
    StreamLoadSpec,
    run_stream_load,
    stream_answer,
)
from rollstream.dev.bench.stream_profile import area, event_costs, split_events, summarise_profile
from rollstream.dev.bench.stream_report import (
    ModeRun,
    bound_of,
    capacity,
    mode_run,
    stream_section,
    summarise,
    summary_row,
    verdicts,
)
from rollstream.dev.bench.suite import ORDER
from rollstream.dev.bench.summary import ROWS, summary_table
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings


def _run(mode: str, round_: int, tokens_per_s: float, us: float, **kw: Any) -> ModeRun:
    """A run of 10 s whose figures are given directly."""
    figures: dict[str, Any] = {
        "mode": mode,
        "round": round_,
        "calls": 100,
        "calls_ok": 100,
        "errors": 0,
        "tokens": int(tokens_per_s * 10),
        "wall_s": 10.0,
        "tokens_per_s": tokens_per_s,
        "events_per_call": 1002.0,
        "proxy_processes": 3 if mode.startswith("rollstream-2w") else 1,
        "proxy_cpu_us_per_token": us,
        "proxy_wakeups_per_ktoken": 50.0,
        "proxy_cores": tokens_per_s * us / 1e6,
        "proxy_busiest_cores": tokens_per_s * us / 1e6,
        "proxy_wait_cores": 0.2,
        "backend_cores": 0.5,
        "backend_wait_cores": 0.1,
        "backend_cpu_us_per_token": 50.0,
        "load_cores": 0.1,
        "load_cpu_us_per_token": 10.0,
        "machine_busy_cores": 1.0,
        "others_cores": 0.0,
    }
    return ModeRun(**(figures | kw))


def _result(scale: float = 1.2, ours_us: float = 44.0, router: bool = True) -> dict[str, Any]:
    runs = []
    for round_ in range(3):
        jitter = 1 + round_ / 100
        runs += [
            _run("mitmproxy", round_, 10_000, 40.0 * jitter),
            _run("rollstream-1w", round_, 9_000, ours_us * jitter),
            _run("rollstream-2w", round_, 9_000 * scale, ours_us, machine_busy_cores=1.95),
        ]
        if router:
            runs.append(_run("rollstream-2w-router", round_, 8_000, 2 * ours_us))
    paths = ["mitmproxy", "rollstream-1w", "rollstream-2w"] + (["rollstream-2w-router"] * router)
    config = {"max_tokens": 1000, "sessions": 4, "duration_s": 20.0, "rounds": 3}
    config |= {"clients": 1, "read_batch_ms": 2.0, "router": router}
    result = summarise(runs, paths, cores=2) | {"config": config, "cores": 2}
    result["kafka"] = {"records": 10, "distinct": 10, "statuses": {"ok": 10}}
    return result | {"kafka": result["kafka"] | {"calls_through_rollstream": 10}}


def test_mode_run_figures() -> None:
    calls = [(0, 100.0, 101.0, 1002, ""), (1, 100.5, 102.0, 1002, ""), (0, 101.0, 101.5, 3, "x")]
    run = mode_run(
        "rollstream-2w", 0, 1000, calls, [0.1, 0.5, 0.4], 1.0, 0.2, 3.6, 2.0, 300, 0.4, 0.2
    )
    assert (run.calls, run.calls_ok, run.errors, run.tokens) == (3, 2, 1, 2000)
    assert run.wall_s == 2.0 and run.tokens_per_s == 1000.0
    assert run.proxy_cpu_us_per_token == 500.0  # all three processes: 1 s over 2,000 tokens
    assert run.proxy_wakeups_per_ktoken == 150.0
    assert (run.proxy_wait_cores, run.backend_wait_cores) == (0.2, 0.1)
    assert (run.proxy_cores, run.proxy_busiest_cores) == (0.5, 0.25)  # over the 2 s window
    assert (run.backend_cores, run.load_cores, run.machine_busy_cores) == (0.5, 0.1, 1.8)
    assert run.others_cores == 0.7  # 3.6 busy - (1.0 + 1.0 + 0.2) ours, over 2 s
    assert run.errors_by_kind == {"x": 1} and run.events_per_call == 1002
    empty = mode_run("mitmproxy", 0, 1000, [(0, 1.0, 2.0, 0, "http_502")], [0.1], 0, 0, 0, 1)
    assert empty.tokens == 0 and empty.proxy_cpu_us_per_token is None


def test_bound_of() -> None:
    path = {"machine_busy_cores": 1.0, "backend_cores": 0.5, "proxy_busiest_cores": 0.5}
    assert bound_of(path, 2) == "pace"
    assert bound_of(path | {"proxy_busiest_cores": 0.95}, 2) == "proxy"
    assert bound_of(path | {"backend_cores": 0.92, "proxy_busiest_cores": 0.95}, 2) == "backend"
    assert bound_of(path | {"machine_busy_cores": 1.85, "backend_cores": 0.95}, 2) == "machine"


def test_summary_ratios_and_capacity() -> None:
    result = _result()
    by = {p["mode"]: p for p in result["paths"]}
    assert by["mitmproxy"]["proxy_cpu_us_per_token"] == 40.4  # the median round
    assert result["mitmproxy_cpu_us_per_token"] == 40.4
    assert result["rollstream_cpu_us_per_token"] == 44.44
    assert by["rollstream-1w"]["tokens_per_s_range"] == [9000, 9000]
    assert by["rollstream-2w"]["bound"] == "machine" and by["mitmproxy"]["bound"] == "pace"
    ratios = result["ratios"]
    assert ratios["cpu_per_token_vs_mitmproxy"] == {"median": 1.1, "range": [1.1, 1.1]}
    assert ratios["tokens_per_s_2w_vs_1w"]["median"] == 1.2
    assert ratios["router_cpu_per_token_vs_direct"]["median"] == 2.0
    cap = result["capacity"]
    assert cap["backend"] == 20_000 and cap["mitmproxy"] == round(1e6 / 40.4)
    assert cap["rollstream-2w"] == round(2e6 / 44) and cap["machine_2w"] == round(2e6 / 104)
    assert capacity([], 2) == {"backend": None}
    assert "router_tokens_per_s_vs_direct" not in _result(router=False)["ratios"]


def test_verdicts_and_section() -> None:
    met = _result(scale=1.8, ours_us=44.0)
    assert verdicts(met).as_dict() == {
        "cpu_ratio": 1.1,
        "cpu_met": True,
        "scaling": 1.8,
        "scaling_met": True,
    }
    text = "\n".join(stream_section(met))
    assert "≤ 1.10 x plain mitmproxy: met (44.4 vs 40.4 µs: 1.10 x" in text
    assert "≥ 1.8 x the tokens/s of one: met (16,200 vs 9,000 tokens/s: 1.80 x" in text
    assert "rollstream-2w: the machine (1.95 of 2 cores busy)" in text
    assert "mitmproxy: nothing saturated" in text
    assert "out of reach" not in text  # 2e6 / 104 µs = 19,231 tokens/s > 1.8 x 9,000
    assert "router instead of straight to the workers: 2.00 x the proxy CPU" in text
    assert "10 CallRecords on the events topic for 10 calls through rollstream" in text
    row = "| rollstream-2w | 16,200 (16,200 to 16,200) | 44.0 | 50 | 0.71 (0.71) | 0.50 (50.0) "
    assert row + "| 0.20 / 0.10 | 0.10 (10.0) | 1.95 / 0.00 | 300 (0) |" in text

    missed = _result(scale=1.1, ours_us=48.0, router=False)
    v = verdicts(missed)
    assert not v.cpu_met and not v.scaling_met
    text = "\n".join(stream_section(missed))
    assert "plain mitmproxy: MISSED" in text and "the tokens/s of one: MISSED" in text
    assert "router" not in text
    row = summary_row(missed)
    assert row.startswith("48.48 vs 40.4 µs proxy CPU per streamed token (1.20 x; target 1.10 x")
    assert "9,000 tokens/s with one worker, 9,900 with two (1.10 x" in row
    assert row.endswith("missed, bound by machine)")


def test_out_of_reach_when_the_machine_cannot_carry_it() -> None:
    result = _result(scale=1.2)
    result["capacity"]["machine_2w"] = 12_000  # < 1.8 x 9,000
    assert "out of reach on this machine" in "\n".join(stream_section(result))


def test_registered() -> None:
    assert SECTIONS["stream"] is stream_section
    assert ("stream", summary_row) in {(name, read) for name, _, read in ROWS}
    assert ORDER.index("stream") == ORDER.index("interceptor") + 1
    group = cli.commands["bench"]
    assert isinstance(group, click.Group) and "stream" in group.commands


def test_written_into_results_and_the_readme_table(tmp_path: Path) -> None:
    results, markdown = tmp_path / "results.json", tmp_path / "RESULTS.md"
    data = record(results, "stream", _result())
    write_markdown(data, markdown)
    assert "## Streamed tokens through the proxy" in markdown.read_text()
    assert "machine" in json.loads(results.read_text())["benchmarks"]["stream"]
    table = "\n".join(summary_table(data))
    assert "| streamed tokens, mitmproxy vs rollstream 1 and 2 workers | 44.44 vs 40.4 µs" in table


def _chunk(content: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    choice |= {"logprobs": {"content": [{"token": content, "logprob": -0.5}]}, "token_ids": [7]}
    return b"data: " + json.dumps({"id": "c", "model": "m", "choices": [choice]}).encode()


def test_profile_helpers(tmp_path: Path) -> None:
    assert area("/x/site-packages/mitmproxy/proxy/layer.py") == "mitmproxy"
    assert area("/work/rollstream/apis/sse.py") == "rollstream"
    assert (area("~"), area("/somewhere/else.py")) == ("builtins", "other")
    stream = b"\n\n".join([_chunk("a"), _chunk("b"), _chunk("", "length"), b"data: [DONE]"])
    events = split_events([stream[:50], stream[50:] + b"\n\n"])
    assert len(events) == 4 and all(e.endswith(b"\n\n") for e in events)
    costs = event_costs(events, tokens=3, repeats=2)
    assert set(costs) == {"parse", "capture", "translate", "stream"}
    assert all(v > 0 for v in costs.values())

    profile = cProfile.Profile()
    profile.runcall(split_events, [stream] * 100)
    profile.dump_stats(tmp_path / "p.prof")
    summary = summarise_profile(tmp_path / "p.prof", tokens=300, top=3)
    assert summary["tokens"] == 300 and len(summary["hottest"]) <= 3
    assert summary["us_per_token"] > 0 and "rollstream" in summary["areas"]


async def _serve(parts: list[bytes]) -> TestServer:
    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for part in parts:
            await response.write(part)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    server = TestServer(app)
    await server.start_server()
    return server


async def test_stream_answer_counts_events_split_across_reads() -> None:
    event = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
    last = b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'
    stream = event * 3 + last
    cut = len(event) + 3  # inside the second event's marker
    for parts, want in (([stream[:cut], stream[cut:]], 4), ([event, b"data: [DONE]\n\n"], None)):
        server = await _serve(parts)
        try:
            async with aiohttp.ClientSession() as http:
                url = str(server.make_url("/v1/chat/completions"))
                if want is None:
                    with pytest.raises(StreamFailed, match="not_cut_at_max_tokens"):
                        await stream_answer(http, url, {}, "k")
                else:
                    assert await stream_answer(http, url, {}, "k") == want
        finally:
            await server.close()


async def test_a_session_started_after_its_window_still_makes_one_call() -> None:
    """A load process slow to start on a busy machine (seen: the 2-worker path of a 1 s run
    served no call, and the run reported none) measures one call per session, no more."""
    answer = b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'
    server = await _serve([answer])
    try:
        url = str(server.make_url("")).rstrip("/")
        late = StreamLoadSpec(
            keys=["a", "b"],
            urls=[url, url],
            body={},
            start_at=time.time() - 5.0,
            duration_s=1.0,
            read_batch_ms=0,
        )
        result = await run_stream_load(late)
    finally:
        await server.close()
    assert sorted(c[0] for c in result.calls) == [0, 1]
    assert all(not c[4] for c in result.calls), result.calls


@pytest.mark.integration
async def test_small_run(kafka_settings: KafkaSettings, rollstream_topics: TopicNames) -> None:
    config = replace(SMALL, duration_s=1.0, start_delay_s=1.5)
    lines: list[str] = []
    result = await run_stream_bench(config, kafka_settings, lines.append)
    paths = {p["mode"]: p for p in result["paths"]}
    assert list(paths) == ["mitmproxy", "rollstream-1w", "rollstream-2w"] and len(lines) == 3
    for path in paths.values():
        assert path["errors"] == 0 and path["calls_ok"] > 0, path
        assert path["tokens_per_s"] > 0 and path["proxy_cpu_us_per_token"] > 0
        assert path["events_per_call"] >= config.max_tokens
    assert paths["rollstream-2w"]["proxy_processes"] == 3  # the supervisor and two workers
    kafka = result["kafka"]
    assert kafka["records"] == kafka["calls_through_rollstream"] == kafka["distinct"] > 0
    assert "## Streamed tokens through the proxy" in "\n".join(stream_section(result))
