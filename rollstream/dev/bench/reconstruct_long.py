"""``rollstream bench reconstruct``, long sessions: the cost per call as sessions grow.

Sessions of 100, 2,000 and 10,000 calls (by default) whose context grows to ~100k tokens, made
by :mod:`rollstream.dev.bench.long_sessions` (prompts and upstream requests delta-encoded against
the previous call, as the interceptor writes them) and Avro-encoded beforehand. Timed per
session, in-process without Kafka, as the throughput part: Avro decode of its records,
PartitionBuffers, ``build_trajectory`` (prompt and request chains resolved, the strategy, the
conversation) and Avro encode of the trajectory. Reconstruction is linear in the session when
the time per call stays flat while the number of calls grows 100-fold (the mean context is
about the same at every size). Peak memory: what ``build_trajectory`` allocates above the
decoded records at most (tracemalloc, in a separate untimed run), and the process's resident
high-water mark after each size (sizes run smallest first; it includes the encoded and decoded
records).
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from rollstream.consumers.reconstruct.buffers import PartitionBuffers, build_trajectory
from rollstream.consumers.reconstruct.strategies import get_strategy
from rollstream.dev.bench.common import status_kb
from rollstream.dev.bench.long_sessions import LongSession, LongShape
from rollstream.schemas import AvroRecord, AvroSerializer

Progress = Callable[[str], None]


def _run_once(
    values: list[bytes], strategy_name: str, trace: bool
) -> tuple[dict[str, float], int, int, str]:
    """One session through decode, buffers, build and encode: phase seconds, peak bytes."""
    serializer = AvroSerializer()
    strategy = get_strategy(strategy_name)
    began = time.perf_counter()
    records: list[AvroRecord] = [serializer.decode(v) for v in values]
    decoded = time.perf_counter()
    buffers = PartitionBuffers(0)
    for offset, record in enumerate(records):
        buffers.add(offset, record, decoded)
    ((buffer, status),) = buffers.ready(decoded, 10.0, 3600.0)
    buffered = time.perf_counter()
    if trace:
        tracemalloc.start()
    try:
        trajectory = build_trajectory(buffer, status, strategy, strategy_name)
        peak = tracemalloc.get_traced_memory()[1] if trace else 0
    finally:
        if trace:
            tracemalloc.stop()
    built = time.perf_counter()
    serializer.encode(trajectory)
    encoded = time.perf_counter()
    phases = {
        "decode": decoded - began,
        "buffer": buffered - decoded,
        "build": built - buffered,
        "encode": encoded - built,
    }
    return phases, peak, len(trajectory.segments), trajectory.status.value


def measure_long_sessions(
    sizes: tuple[int, ...],
    final_tokens: int,
    system_tokens: int,
    rounds: int,
    strategy: str,
    progress: Progress,
) -> dict[str, Any]:
    """Per-call reconstruction cost and peak memory for one session of each size."""
    rows = []
    serializer = AvroSerializer()
    for calls in sizes:
        shape = LongShape(calls=calls, final_tokens=final_tokens, system_tokens=system_tokens)
        session = LongSession(f"long-{calls}", shape, seed=calls)
        values = [serializer.encode(r) for r in session.records()]
        runs = sorted(
            (_run_once(values, strategy, trace=False) for _ in range(rounds)),
            key=lambda run: sum(run[0].values()),
        )
        phases, _, segments, status = runs[len(runs) // 2]
        _, peak, _, _ = _run_once(values, strategy, trace=True)
        totals = sorted(sum(run[0].values()) for run in runs)
        row = {
            "calls": calls,
            "context_tokens_last": shape.last_context_tokens,
            "tokens_per_call": shape.growth,
            "record_bytes": sum(len(v) for v in values),
            "ms_per_call": round(sum(phases.values()) / calls * 1000, 4),
            "ms_per_call_range": [round(t / calls * 1000, 4) for t in (totals[0], totals[-1])],
            "ms_per_call_phases": {k: round(v / calls * 1000, 4) for k, v in phases.items()},
            "session_s": round(sum(phases.values()), 3),
            "build_peak_mb": round(peak / 1e6, 1),
            "process_peak_rss_mb": round(status_kb()["VmHWM"] / 1024, 1),
            "segments": segments,
            "status": status,
        }
        progress(
            f"  {calls} calls (context to {shape.last_context_tokens:,} tokens): "
            f"{row['ms_per_call']} ms/call ({row['ms_per_call_phases']}), build peak "
            f"{row['build_peak_mb']} MB (RSS peak {row['process_peak_rss_mb']} MB), "
            f"{segments} segment(s), {status}"
        )
        rows.append(row)
    return {
        "strategy": strategy,
        "rounds": rounds,
        "sessions": rows,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        # A shared machine's numbers say little without how busy it was.
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def long_sessions_section(long: dict[str, Any] | None) -> list[str]:
    """The long-session part of the reconstruction section of RESULTS.md."""
    if not long:
        return ["Long sessions: not run.", ""]
    rows = long["sessions"]
    lines = [
        "Long sessions, in-process without Kafka: one session of each size, its context "
        f"growing to ~{rows[-1]['context_tokens_last']:,} tokens, prompts and upstream "
        "requests delta-encoded against the previous call as the interceptor writes them "
        f"(`{long['strategy']}`). Timed as above: decode, PartitionBuffers, build_trajectory "
        "(prompt and request chains resolved, the strategy, the conversation), encode; median "
        f"of {long['rounds']} rounds (range in brackets). Build peak: what build_trajectory "
        "allocates at most above the decoded records (tracemalloc, separate run); RSS peak: "
        "the process's high-water mark after that size (records included, sizes in order). "
        f"Measured {long.get('date', '?')}, load average "
        f"{long.get('load_average_1min', '?')} at the end.",
        "",
        "| calls | context tokens (last) | ms/call | ms/call: decode / buffer / build / encode "
        "| session s | build peak MB | RSS peak MB | segments | status |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ms = r["ms_per_call_phases"]
        low, high = r["ms_per_call_range"]
        lines.append(
            f"| {r['calls']:,} | {r['context_tokens_last']:,} | {r['ms_per_call']} "
            f"({low} to {high}) | {ms['decode']} / {ms['buffer']} / {ms['build']} / "
            f"{ms['encode']} | {r['session_s']} | {r['build_peak_mb']} "
            f"| {r.get('process_peak_rss_mb', '-')} | {r['segments']} "
            f"| {r['status']} |"
        )
    first, last = rows[0], rows[-1]
    ratio = last["ms_per_call"] / first["ms_per_call"] if first["ms_per_call"] else float("nan")
    flat = ratio <= 2.0
    lines += [
        "",
        f"- Target time per call flat as sessions grow ({first['calls']:,} to "
        f"{last['calls']:,} calls: at most 2x): {'met' if flat else 'MISSED'} "
        f"({ratio:.2f}x).",
        "",
    ]
    return lines
