"""The benchmark summary table at the top of ``bench/RESULTS.md``, from ``bench/results.json``.

One row per benchmark that has results, each number read from the JSON the benchmarks write, so
the summary cannot drift from the sections below it (both come from the same file). ``rollstream
bench`` rewrites RESULTS.md after each run (``write_markdown``); by hand::

    python -m rollstream.dev.bench.summary                           # print the table
    python -m rollstream.dev.bench.summary --write bench/RESULTS.md  # replace the block
    python -m rollstream.dev.bench.summary --check bench/RESULTS.md  # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollstream.dev.bench.stream_report import summary_row as _stream
from rollstream.dev.docs_block import DocBlock

START = "<!-- bench-table:start -->"
END = "<!-- bench-table:end -->"
RESULTS = Path("bench/results.json")
BLOCK = DocBlock(
    START,
    END,
    "the benchmark table",
    "python -m rollstream.dev.bench.summary --write bench/RESULTS.md",
)
#: The interceptor's CPU target against plain mitmproxy (the RESULTS.md section states it too).
INTERCEPTOR_CPU_TARGET = 1.3

Result = dict[str, Any]


def _backend(result: Result) -> str:
    levels = result["levels"]
    best = max(levels, key=lambda level: level["tokens_per_s"])
    clean = max((lv["concurrency"] for lv in levels if lv["errors"] == 0), default=0)
    return (
        f"{best['tokens_per_s']:,.0f} streamed tokens/s at {best['concurrency']} streams; "
        f"{clean} concurrent streams without errors"
    )


def _interceptor(result: Result) -> str:
    modes = {mode["mode"]: mode for mode in result["modes"]}
    ours = modes["rollstream"]["proxy_cpu_ms_per_call"]
    plain = modes["mitmproxy"]["proxy_cpu_ms_per_call"]
    ratio = result["cpu_ratio_vs_mitmproxy"]
    low, high = result.get("cpu_ratio_range", (ratio, ratio))
    met = "met" if ratio <= INTERCEPTOR_CPU_TARGET else "missed"
    return (
        f"{ours} vs {plain} ms proxy CPU per call ({ratio}x, rounds {low}-{high}x; target "
        f"{INTERCEPTOR_CPU_TARGET}x {met}); TTFT p50 +{result['added_ttft_p50_ms']} ms over direct"
    )


def _node(result: Result) -> str:
    modes = {m["mode"]: m for m in result["modes"] if m.get("runtime", "local") == "local"}
    warm, cold = modes["prewarm"], modes["no_prewarm"]
    return (
        f"{warm['sessions_per_min']:,.0f} sessions/min with `--prewarm {warm['prewarm']}`, "
        f"{cold['sessions_per_min']:,.0f} without"
    )


def _reconstruct(result: Result) -> str:
    throughput = result["throughput"]
    rates = ", ".join(f"{s['calls_per_s']:,} (`{s['strategy']}`)" for s in throughput["strategies"])
    text = (
        f"{rates} calls/s on {throughput['calls_per_session']}-call sessions with "
        f"{throughput['prompt_tokens_first'] // 1000}k-"
        f"{throughput['prompt_tokens_last'] // 1000}k-token prompts"
    )
    long = result.get("long_sessions")
    if long and long.get("sessions"):
        costs = ", ".join(f"{s['ms_per_call']:.2f} ms at {s['calls']:,}" for s in long["sessions"])
        last = long["sessions"][-1]["context_tokens_last"] // 1000
        text += f"; per call in sessions growing to {last}k tokens: {costs} calls"
    e2e = result.get("end_to_end")
    if e2e:
        text += (
            f"; SessionEnded → trajectory via Kafka p99 {e2e['latency_p99_ms']} ms at "
            f"{e2e['rate_achieved']:g} sessions/s"
        )
    return text


def _pipeline(result: Result) -> str:
    rec, scorer, e2e = result["reconstructor"], result["scorer"], result["end_to_end"]
    return (
        f"reconstructor {rec['per_s']:,} calls/s, scorer {scorer['per_s']:,} trajectories/s "
        f"(one process each); SessionEnded → scored p99 {e2e['latency_p99_ms']} ms at "
        f"{e2e['rate_achieved']:g} sessions/s, {e2e['missing']} missing, "
        f"{e2e['duplicates']} duplicated"
    )


def _publisher(result: Result) -> str:
    encodings = {e["encoding"]: e for e in result["throughput"]["encodings"]}
    session = {e["encoding"]: e for e in result["session"]["encodings"]}
    delta = encodings["delta"]
    return (
        f"{delta['records_per_s']:,} records/s ({delta['cpu_us_per_record']} µs CPU each) "
        f"delta-encoded; a {result['session']['turns']}-turn session weighs "
        f"{session['delta']['log_bytes'] / 1000:,.0f} kB in the log, "
        f"{session['naive']['log_bytes'] / 1e6:,.1f} MB without deltas"
    )


def _cluster(result: Result) -> str:
    single, cluster = result["setups"][0], result["setups"][-1]
    ratio = result["ratio"]
    return (
        f"{cluster['records_per_s']:,} vs {single['records_per_s']:,} records/s "
        f"({ratio['records_per_s']}x) into {cluster['nodes']} nodes "
        f"({cluster['replication_factor']} replicas, min ISR {cluster['min_insync_replicas']}) "
        "vs one broker; publish → ack p99 "
        f"{cluster['latency_p99_ms']} vs {single['latency_p99_ms']} ms at "
        f"{result['config']['rate']:g} records/s"
    )


def _instances(result: Result) -> str:
    def rates(counts: list[Result], key: str) -> str:
        return " / ".join("n/a" if c[key] is None else f"{c[key]:,}" for c in counts)

    rec, scorer = result["reconstructor"]["counts"], result["scorer"]["counts"]
    return (
        f"with {' / '.join(str(c['instances']) for c in rec)} instances: reconstructor "
        f"{rates(rec, 'per_s')} calls/s ({rates(rec, 'per_instance_s')} each), scorer "
        f"{rates(scorer, 'per_s')} trajectories/s ({rates(scorer, 'per_instance_s')} each)"
    )


def _scale(result: Result) -> str:
    load, proxy = result["load"], result["interceptor"]
    return (
        f"{load['peak_sessions_open']:,} sessions open at once through one interceptor: "
        f"{load['calls_ok']:,} of {load['calls_expected']:,} calls, {load['errors']} errors, "
        f"{proxy['kb_per_session']} kB per session, {proxy['cpu_ms_per_call']} ms CPU per call"
    )


def _fidelity(result: Result) -> str:
    config, rows = result["config"], result["rows"]
    solved = sum(1 for row in rows if row.get("outcome") == "ok")
    # The model is the reference backend playing a script: the harnesses completed the task it
    # plays, which says the capture held, not that a model can solve anything.
    return (
        f"{len(config['families'])} families x {len(config['harnesses'])} real harnesses x "
        f"{len(config['modes'])} context modes: {solved}/{len(rows)} sessions completed the "
        "scripted task (the reference backend plays the model)"
    )


def _wall(result: Result) -> str:
    walled, direct = result["modes"]["walled"], result["modes"]["direct"]
    ratio = result["walled_over_direct"]
    return (
        f"harness start {ratio['start_ms']}x ({walled['start_ms']} ms), round trip "
        f"{walled['round_trip_p50_us']:.0f} µs vs {direct['round_trip_p50_us']:.0f} µs direct, "
        f"{walled['bulk_mb_per_s']:.0f} MB/s relayed"
    )


def _long_session(result: Result) -> str:
    return "; ".join(
        f"{run['calls']:,} calls drifting at every call"
        + (f" (compacted every {run['compact']})" if run["compact"] else "")
        + f": {run['trajectory_bytes'] / 1e6:.1f} MB in the log for "
        f"{run['materialised_tokens'] / 1e6:.1f} M tokens of segments"
        for run in result["runs"]
    )


#: In the summary's order: (benchmark, what its row is called, how its result reads).
ROWS: tuple[tuple[str, str, Callable[[Result], str]], ...] = (
    ("backend", "reference backend, one core", _backend),
    ("interceptor", "interceptor vs plain mitmproxy", _interceptor),
    ("stream", "streamed tokens, mitmproxy vs rollstream 1 and 2 workers", _stream),
    ("scale", "one interceptor, many sessions", _scale),
    ("node", "rollout node (sleep-based sessions)", _node),
    ("wall", "a session's network wall vs none", _wall),
    ("publisher", "capture publisher", _publisher),
    ("cluster", "publisher into a 3-node cluster vs one broker", _cluster),
    ("reconstruct", "reconstruction, one process", _reconstruct),
    ("pipeline", "reconstruct + score through Kafka", _pipeline),
    ("instances", "reconstructor and scorer, more instances", _instances),
    ("fidelity", "model families x real harnesses", _fidelity),
    ("long-session", "long sessions through the stack", _long_session),
)


def summary_body(data: Result) -> str:
    """The table and its heading line for the benchmarks that have results in ``data``."""
    benchmarks = data.get("benchmarks", {})
    machines = [b.get("machine", {}) for b in benchmarks.values()]
    cores = {m.get("cores") for m in machines} - {None}
    cpus = {m.get("cpu") for m in machines} - {None}
    dates = sorted(m.get("date", "")[:10] for m in machines if m.get("date"))
    where = (
        f"{'/'.join(str(c) for c in sorted(cores))}-core {', '.join(sorted(cpus))}"
        if cores
        else "unknown machine"
    )
    span = f", measured {dates[0]} to {dates[-1]}" if dates else ""
    lines = [
        f"On a {where}{span} (generated from `bench/results.json`):",
        "",
        "| what | result |",
        "|---|---|",
    ]
    for name, label, read in ROWS:
        if name in benchmarks:
            lines.append(f"| {label} | {read(benchmarks[name])} |")
    return "\n".join(lines)


def summary_table(data: Result) -> list[str]:
    """The lines of the table with its markers, as RESULTS.md holds them."""
    return BLOCK.wrap(summary_body(data)).split("\n")


def replace_table(text: str, table: list[str]) -> str:
    """``text`` with what lies between the markers (included) replaced by ``table``."""
    return BLOCK.replace(text, BLOCK.body("\n".join(table)))


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the benchmark summary table of a Markdown file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    BLOCK.add_arguments(parser, "RESULTS.md")
    args = parser.parse_args(argv)
    body = summary_body(json.loads(args.results.read_text()))
    return BLOCK.run(args, body, shown=BLOCK.wrap(body))


if __name__ == "__main__":
    sys.exit(main())
