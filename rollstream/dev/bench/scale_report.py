"""``rollstream bench scale``: its figures from the calls and samples, its verdict and section.

Pure functions, so what the benchmark concludes is tested without running it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rollstream.dev.bench.common import percentile
from rollstream.dev.bench.runner import table

#: One call of the load: session, turn, began, first content (0: none), end, error kind ("": ok).
Call = tuple[int, int, float, float, float, str]
#: One sample of the interceptor: wall time, VmRSS kB, CPU seconds, run-queue wait seconds.
Sample = tuple[float, int, float, float]

TARGET_SESSIONS = 1000
TARGET_RSS_MB = 2048.0


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` intervals open at one moment."""
    # At a tie an end sorts first: a session's next call starting as its last one ended is
    # not two calls at once.
    events = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def summarise_calls(calls: list[Call], sessions: int, turns: int) -> dict[str, Any]:
    """Errors by kind, latencies, calls/s and concurrency of the load's calls.

    ``all_open``: the stretch during which every session was open (its first call begun, its
    last not yet ended), or None.
    """
    ok = [c for c in calls if not c[5]]
    ok_per_session = Counter(c[0] for c in ok)
    spans: dict[int, tuple[float, float]] = {}
    for session, _, began, _, end, _ in calls:
        first, last = spans.get(session, (began, end))
        spans[session] = (min(first, began), max(last, end))
    began = min((c[2] for c in calls), default=0.0)
    ended = max((c[4] for c in calls), default=0.0)
    ttfts = [(c[3] - c[2]) * 1000 for c in ok if c[3]]
    totals = [(c[4] - c[2]) * 1000 for c in ok]
    open_from = max((s for s, _ in spans.values()), default=0.0)
    open_until = min((e for _, e in spans.values()), default=0.0)
    return {
        "calls": len(calls),
        "calls_expected": sessions * turns,
        "calls_ok": len(ok),
        "errors": len(calls) - len(ok),
        "errors_by_kind": dict(Counter(c[5] for c in calls if c[5])),
        "sessions": len(spans),
        "sessions_completed": sum(1 for n in ok_per_session.values() if n == turns),
        "wall_s": round(ended - began, 2),
        "calls_per_s": round(len(calls) / (ended - began), 1) if ended > began else 0.0,
        "peak_calls_in_flight": peak_overlap([(c[2], c[4]) for c in calls]),
        "peak_sessions_open": peak_overlap(list(spans.values())),
        "all_open": [open_from, open_until] if open_until > open_from else None,
        "ttft_p50_ms": round(percentile(ttfts, 50), 1),
        "ttft_p99_ms": round(percentile(ttfts, 99), 1),
        "latency_p50_ms": round(percentile(totals, 50), 1),
        "latency_p99_ms": round(percentile(totals, 99), 1),
    }


def window_usage(samples: list[Sample], window: list[float] | None) -> dict[str, Any] | None:
    """The interceptor's CPU and run-queue wait per second of wall time within ``window``."""
    inside = [s for s in samples if window and window[0] <= s[0] <= window[1]]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    seconds = inside[-1][0] - inside[0][0]
    return {
        "seconds": round(seconds, 2),
        "cpu_utilisation": round((inside[-1][2] - inside[0][2]) / seconds, 3),
        "wait_per_s": round((inside[-1][3] - inside[0][3]) / seconds, 3),
    }


def target_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Whether the run meets "1,000 sessions with no error and RSS ≤ 2 GB", and why not."""
    load, proxy, kafka = result["load"], result["interceptor"], result["kafka"]
    short = []
    if load["sessions"] < TARGET_SESSIONS:
        short.append(f"{load['sessions']} sessions, fewer than {TARGET_SESSIONS:,}")
    if load["peak_sessions_open"] < load["sessions"]:
        short.append(f"only {load['peak_sessions_open']} sessions open at once")
    if load["errors"] or load["calls"] != load["calls_expected"]:
        short.append(
            f"{load['errors']} errors in {load['calls']} of {load['calls_expected']} calls"
        )
    if kafka["records"] != load["calls"] or kafka["distinct"] != kafka["records"]:
        short.append(
            f"{kafka['records']} records ({kafka['distinct']} distinct) for {load['calls']} calls"
        )
    if proxy["hwm_mb"] > TARGET_RSS_MB:
        short.append(f"peak RSS {proxy['hwm_mb']} MB")
    if proxy["exit_code"] != 0:
        short.append(f"interceptor exit code {proxy['exit_code']}")
    return {"met": not short, "shortfalls": short}


def scale_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section of ``rollstream bench scale``."""
    config, load, proxy = result["config"], result["load"], result["interceptor"]
    kafka, fds, verdict = result["kafka"], result["fd_limits"], result["target"]
    rate = load["calls_per_s"] * config["max_tokens"]
    clients = ", ".join(f"{c['cpu_utilisation']:.0%}" for c in result["clients"])
    header = (
        "sessions (peak open)", "calls (errors)", "peak calls in flight", "calls/s",
        "TTFT p50 / p99 (ms)", "call p50 / p99 (ms)", "records in Kafka",
        "interceptor RSS MB: start / peak", "CPU ms/call", "peak open files",
    )  # fmt: skip
    row = (
        f"{load['sessions']:,} ({load['peak_sessions_open']:,})",
        f"{load['calls']:,} ({load['errors']})",
        f"{load['peak_calls_in_flight']:,}",
        load["calls_per_s"],
        f"{load['ttft_p50_ms']} / {load['ttft_p99_ms']}",
        f"{load['latency_p50_ms']} / {load['latency_p99_ms']}",
        f"{kafka['records']:,}",
        f"{proxy['rss_start_mb']} / {proxy['hwm_mb']}",
        proxy["cpu_ms_per_call"],
        f"{proxy['fds_peak']:,}",
    )
    lines = [
        "## Scale (`rollstream bench scale`)",
        "",
        f"{config['sessions']:,} sessions at once through one `rollstream interceptor` process "
        f"pinned to its own core, publishing to a real broker. Each session has its own "
        f"connection and key and makes {config['turns']} streamed Chat Completions calls in a "
        f"row, the conversation growing by each answer ({config['max_tokens']} tokens); session "
        f"starts are spread over one call's duration ({config['call_s']:g} s). Upstream: "
        f"{result['backend']['processes']} reference backend process, latency model "
        f"{config['ttft_ms']:g} ms + {config['tpot_ms']:g} ms/token so that the streams are open "
        f"side by side at {rate:,.0f} tokens/s in all (one backend process streams ~3,500 "
        f"tokens/s, `bench backend`); its CPU: {result['backend']['cpu_utilisation']:.0%}. "
        f"Load: {len(result['clients'])} separate process(es), CPU {clients}. Memory: the "
        f"interceptor's VmRSS sampled every {config['sample_interval_s']:g} s and the kernel's "
        "high-water mark VmHWM. Records: the run's CallRecords in the events topic, by key.",
        "",
        *table(header, "rrrrllrlrr", [row]),
        "",
    ]
    if load["errors_by_kind"]:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(load["errors_by_kind"].items()))
        lines += [f"Errors by kind: {kinds}.", ""]
    reason = "; ".join(verdict["shortfalls"]) or (
        f"{load['sessions']:,} sessions, {load['calls']:,} calls, 0 errors, "
        f"{kafka['records']:,} records, peak RSS {proxy['hwm_mb']} MB"
    )
    per_call, steady = proxy["cpu_ms_per_call"], proxy.get("all_open")
    capacity = f"about {1000 / per_call:,.0f}" if per_call > 0 else "any number of"
    lines += [
        f"- Target {TARGET_SESSIONS:,} sessions with no error and RSS ≤ 2 GB: "
        f"{'met' if verdict['met'] else 'MISSED'} ({reason}).",
        f"- Memory: {proxy['kb_per_session']:,} kB per open session above the idle process "
        "(VmHWM less the RSS before the load).",
        f"- CPU: {per_call} ms of interceptor CPU per call (an answer of "
        f"{config['max_tokens']} tokens comes as that many chunks), so its core would carry "
        f"{capacity} calls/s saturated; this run made {load['calls_per_s']} calls/s"
        + (
            f", and while all sessions were open ({steady['seconds']:g} s) the interceptor used "
            f"{steady['cpu_utilisation']:.0%} of its core."
            if steady
            else "."
        )
        + " A faster model makes more calls per second from the same sessions; that rate, "
        "not the number of sessions, is then what one interceptor process must keep up with.",
    ]
    if proxy["wait_s"] > 0.2 * proxy["cpu_s"]:
        lines.append(
            f"- The machine was busy: the interceptor waited {proxy['wait_s']:g} s on the run "
            f"queue for its core during the load, against {proxy['cpu_s']:g} s of CPU it got; "
            f"latencies above the backend's model ({config['call_s']:g} s a call) "
            f"include that wait."
        )
    lines += [
        f"- Open files: soft limit {fds['soft']}, hard {fds['hard']}; the interceptor needs "
        f"about {fds['needed']['interceptor']:,} (a client and an upstream connection per "
        f"session), raised in its preexec_fn: "
        f"{'BLOCKED by the hard limit' if fds['blocked'] else 'within the hard limit'}.",
        "",
    ]
    return lines
