"""``rollstream bench stream``: its figures from the calls and CPU times, verdicts and section.

Pure functions, so what the benchmark concludes (ratios, targets, what bounds the run) is
tested without running it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from rollstream.dev.bench.runner import table

#: One call of the load: session, began, end, SSE events, error kind ("": ok).
StreamCall = tuple[int, float, float, int, str]

TARGET_CPU_RATIO = 1.10  # rollstream's proxy CPU per streamed token over plain mitmproxy's
TARGET_SCALING = 1.8  # two workers' tokens/s over one worker's
SATURATED = 0.9  # a share of a core (or of all cores) from which a party is the bound

#: Figures whose median over the rounds a path reports.
_MEDIAN = (
    "tokens_per_s", "proxy_cpu_us_per_token", "proxy_wakeups_per_ktoken", "proxy_cores",
    "proxy_busiest_cores", "proxy_wait_cores", "backend_cores", "backend_wait_cores",
    "backend_cpu_us_per_token", "load_cores", "load_cpu_us_per_token", "machine_busy_cores",
    "others_cores", "events_per_call",
)  # fmt: skip
_CPU, _RATE, _2W = "proxy_cpu_us_per_token", "tokens_per_s", "rollstream-2w"
#: The ratios of one path's figure over another's: (name, over, under, figure).
_RATIOS = (
    ("cpu_per_token_vs_mitmproxy", "rollstream-1w", "mitmproxy", _CPU),
    ("cpu_per_token_2w_vs_1w", _2W, "rollstream-1w", _CPU),
    ("tokens_per_s_2w_vs_1w", _2W, "rollstream-1w", _RATE),
    ("router_cpu_per_token_vs_direct", f"{_2W}-router", _2W, _CPU),
    ("router_tokens_per_s_vs_direct", f"{_2W}-router", _2W, _RATE),
)


@dataclass(frozen=True)
class ModeRun:
    """One path in one round: what went through it and what each party spent on it."""

    mode: str
    round: int
    calls: int
    calls_ok: int
    errors: int
    tokens: int
    wall_s: float
    tokens_per_s: float
    events_per_call: float
    proxy_processes: int
    proxy_cpu_us_per_token: float | None
    #: The proxies' event loops going idle and waking again: the fewer, the more events per read.
    proxy_wakeups_per_ktoken: float | None
    proxy_cores: float
    proxy_busiest_cores: float
    #: Time runnable but waiting for a core, per second: CPU wanted and not got (so backend_…).
    proxy_wait_cores: float
    backend_cores: float
    backend_wait_cores: float
    backend_cpu_us_per_token: float | None
    load_cores: float
    load_cpu_us_per_token: float | None
    machine_busy_cores: float
    others_cores: float
    errors_by_kind: dict[str, int] = field(default_factory=dict)


def _per_token(cpu_s: float, tokens: int) -> float | None:
    return round(cpu_s / tokens * 1e6, 2) if tokens else None


def mode_run(
    mode: str,
    round_: int,
    max_tokens: int,
    calls: list[StreamCall],
    proxy_cpu_s: list[float],
    backend_cpu_s: float,
    load_cpu_s: float,
    machine_busy_s: float,
    window_s: float,
    proxy_wakeups: int = 0,
    proxy_wait_s: float = 0.0,
    backend_wait_s: float = 0.0,
) -> ModeRun:
    """The figures of one path's run from its calls and each party's CPU seconds over it.

    Every call that ended well streamed ``max_tokens`` tokens (``ignore_eos``, and the load
    checks that the answer was cut at ``max_tokens``). Tokens/s: over the wall time from the
    first call's start to the last one's end. Cores: CPU seconds over ``window_s``, the time
    between the two CPU readings (a little longer: the load processes start and exit in it).
    """
    ok = [c for c in calls if not c[4]]
    tokens = len(ok) * max_tokens
    wall = max((c[2] for c in calls), default=0.0) - min((c[1] for c in calls), default=0.0)
    wall, window = max(wall, 1e-9), max(window_s, 1e-9)
    proxy = sum(proxy_cpu_s)
    ours = proxy + backend_cpu_s + load_cpu_s
    return ModeRun(
        mode=mode,
        round=round_,
        calls=len(calls),
        calls_ok=len(ok),
        errors=len(calls) - len(ok),
        tokens=tokens,
        wall_s=round(wall, 3),
        tokens_per_s=round(tokens / wall, 1),
        events_per_call=statistics.median(c[3] for c in ok) if ok else 0.0,
        proxy_processes=len(proxy_cpu_s),
        proxy_cpu_us_per_token=_per_token(proxy, tokens),
        proxy_wakeups_per_ktoken=round(proxy_wakeups / tokens * 1000, 1) if tokens else None,
        proxy_cores=round(proxy / window, 3),
        proxy_busiest_cores=round(max(proxy_cpu_s, default=0.0) / window, 3),
        proxy_wait_cores=round(proxy_wait_s / window, 3),
        backend_cores=round(backend_cpu_s / window, 3),
        backend_wait_cores=round(backend_wait_s / window, 3),
        backend_cpu_us_per_token=_per_token(backend_cpu_s, tokens),
        load_cores=round(load_cpu_s / window, 3),
        load_cpu_us_per_token=_per_token(load_cpu_s, tokens),
        machine_busy_cores=round(machine_busy_s / window, 3),
        others_cores=round(max(0.0, machine_busy_s - ours) / window, 3),
        errors_by_kind=dict(Counter(c[4] for c in calls if c[4])),
    )


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def _ratios(numerators: list[float | None], denominators: list[float | None]) -> dict[str, Any]:
    """Median and range of the per-round ratios (rounds where either side is missing skipped)."""
    ratios = sorted(
        n / d for n, d in zip(numerators, denominators, strict=False) if n is not None and d
    )
    if not ratios:
        return {"median": None, "range": None}
    return {
        "median": round(statistics.median(ratios), 3),
        "range": [round(ratios[0], 3), round(ratios[-1], 3)],
    }


def bound_of(path: dict[str, Any], cores: int) -> str:
    """What bounds a path's tokens/s: machine, backend, proxy or pace (nothing saturated)."""
    if path["machine_busy_cores"] >= SATURATED * cores:
        return "machine"
    if path["backend_cores"] >= SATURATED:
        return "backend"
    if path["proxy_busiest_cores"] >= SATURATED:
        return "proxy"
    return "pace"


def summarise(runs: list[ModeRun], paths: list[str], cores: int | None = None) -> dict[str, Any]:
    """Medians per path over the rounds, the ratios (per round, then the median) and bounds."""
    cores = cores or 2
    by_path = {p: sorted((r for r in runs if r.mode == p), key=lambda r: r.round) for p in paths}
    out: list[dict[str, Any]] = []
    for path, mine in by_path.items():
        figures: dict[str, Any] = {"mode": path, "rounds": len(mine)}
        for name in _MEDIAN:
            figures[name] = _median([getattr(r, name) for r in mine])
        rates = sorted(r.tokens_per_s for r in mine)
        figures["tokens_per_s_range"] = [rates[0], rates[-1]] if rates else None
        figures["calls_ok"] = sum(r.calls_ok for r in mine)
        figures["errors"] = sum(r.errors for r in mine)
        figures["errors_by_kind"] = dict(sum((Counter(r.errors_by_kind) for r in mine), Counter()))
        figures["proxy_processes"] = max((r.proxy_processes for r in mine), default=0)
        figures["bound"] = bound_of(figures, cores) if mine else None
        out.append(figures)

    def series(path: str, name: str) -> list[float | None]:
        return [getattr(r, name) for r in by_path.get(path, [])]

    ratios = {
        name: _ratios(series(over, figure), series(under, figure))
        for name, over, under, figure in _RATIOS
        if "router" not in name or "rollstream-2w-router" in by_path
    }
    by = {p["mode"]: p for p in out}
    return {
        "paths": out,
        "ratios": ratios,
        "capacity": capacity(out, cores),
        # Read by the sizing plan (``sizing.py``): one worker's cost per streamed token.
        "rollstream_cpu_us_per_token": by.get("rollstream-1w", {}).get(_CPU),
        "mitmproxy_cpu_us_per_token": by.get("mitmproxy", {}).get(_CPU),
    }


def capacity(paths: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    """Tokens/s each party could carry at its measured CPU per token, a core per process.

    The backend is one process (one core); a proxy of N processes spreads its CPU over N cores;
    ``machine``: all the cores shared by proxy, backend and load at the 2-worker path's costs.
    Upper bounds from CPU alone, not measurements.
    """
    by = {p["mode"]: p for p in paths}

    def per_s(us: float | None, processes: float = 1.0) -> int | None:
        return round(processes * 1e6 / us) if us else None

    backend = _median([p["backend_cpu_us_per_token"] for p in paths])
    out: dict[str, Any] = {"backend": per_s(backend)}
    for name, workers in (("mitmproxy", 1), ("rollstream-1w", 1), ("rollstream-2w", 2)):
        if name in by:
            out[name] = per_s(by[name]["proxy_cpu_us_per_token"], workers)
    two = by.get("rollstream-2w")
    if two and two[_CPU] and two["backend_cpu_us_per_token"]:
        costs = (_CPU, "backend_cpu_us_per_token", "load_cpu_us_per_token")
        out["machine_2w"] = per_s(sum(two[k] or 0 for k in costs), cores)
    return out


@dataclass(frozen=True)
class Verdicts:
    """The two targets, met or not, with the figures they were read from."""

    cpu_ratio: float | None
    cpu_met: bool
    scaling: float | None
    scaling_met: bool

    def as_dict(self) -> dict[str, Any]:
        """As stored in the results."""
        return asdict(self)


def verdicts(result: dict[str, Any]) -> Verdicts:
    """Target ≤ 1.10x plain mitmproxy's CPU per token; two workers ≥ 1.8x one's tokens/s."""
    ratio = result["ratios"]["cpu_per_token_vs_mitmproxy"]["median"]
    scaling = result["ratios"]["tokens_per_s_2w_vs_1w"]["median"]
    return Verdicts(
        cpu_ratio=ratio,
        cpu_met=ratio is not None and ratio <= TARGET_CPU_RATIO,
        scaling=scaling,
        scaling_met=scaling is not None and scaling >= TARGET_SCALING,
    )


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} x"


def _range(ratio: dict[str, Any]) -> str:
    low_high = ratio.get("range")
    return f"{low_high[0]:.2f} to {low_high[1]:.2f}" if low_high else "n/a"


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _bound_text(path: dict[str, Any], cores: int) -> str:
    bound = path["bound"]
    if bound == "machine":
        return f"the machine ({path['machine_busy_cores']:.2f} of {cores} cores busy)"
    if bound == "backend":
        return f"the backend (one process, {path['backend_cores']:.2f} of a core)"
    if bound == "proxy":
        return f"the proxy (its busiest process {path['proxy_busiest_cores']:.2f} of a core)"
    return (
        f"nothing saturated ({path['machine_busy_cores']:.2f} of {cores} cores busy): the "
        "sessions' own pace, each waiting on its stream"
    )


_HEADER = (
    "path", "tokens/s", "proxy CPU µs/token", "proxy loop wake-ups per 1k tokens",
    "proxy cores (busiest process)", "backend cores (µs/token)",
    "waiting for a core: proxy / backend", "load cores (µs/token)",
    "machine busy / others (cores)", "calls (errors)",
)  # fmt: skip


def _row(p: dict[str, Any]) -> tuple[str, ...]:
    low, high = p["tokens_per_s_range"] or (None, None)
    return (
        p["mode"],
        f"{_num(p['tokens_per_s'])} ({_num(low)} to {_num(high)})",
        _num(p["proxy_cpu_us_per_token"], 1),
        _num(p["proxy_wakeups_per_ktoken"]),
        f"{p['proxy_cores']:.2f} ({p['proxy_busiest_cores']:.2f})",
        f"{p['backend_cores']:.2f} ({_num(p['backend_cpu_us_per_token'], 1)})",
        f"{p['proxy_wait_cores']:.2f} / {p['backend_wait_cores']:.2f}",
        f"{p['load_cores']:.2f} ({_num(p['load_cpu_us_per_token'], 1)})",
        f"{p['machine_busy_cores']:.2f} / {p['others_cores']:.2f}",
        f"{p['calls_ok']:,} ({p['errors']})",
    )


def stream_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: per path figures, the two targets and what bounds the run."""
    config, cores, ratios = result["config"], result.get("cores") or 2, result["ratios"]
    paths = {p["mode"]: p for p in result["paths"]}
    router = ", and two workers reached through the pool's router" if config["router"] else ""
    lines = [
        "## Streamed tokens through the proxy (`rollstream bench stream`)",
        "",
        f"The reference backend (scripted policy answering with a long text, no latency model) "
        f"streams {config['max_tokens']:,}-token answers as fast as it can; {config['sessions']} "
        f"sessions, each its own key and connection, make streamed calls one after another for "
        f"{config['duration_s']:g} s per path, from {config['clients']} load process(es) that "
        f"count SSE events in the raw bytes (reads batched every {config['read_batch_ms']:g} ms "
        "so the generator costs little). Paths: plain `mitmdump` in reverse mode without an "
        "addon (its clients ask for the token ids, logprobs and usage rollstream asks for, so "
        "the backend streams the same chunks on every path), `rollstream interceptor` with one "
        "worker and with `--workers 2` (sessions registered on the pool's admin port and sent "
        "to their worker's own URL, as the node does)"
        f"{router}. {config['rounds']} rounds alternating the order; medians (tokens/s "
        "range in brackets). Proxy CPU: every proxy process (supervisor and workers), "
        "utime + stime from /proc over the load; cores: CPU seconds per second of wall time; "
        "waiting for a core: time runnable but not running (/proc schedstat), per second; "
        "wake-ups: the proxies' event loops going idle and waking again (voluntary context "
        "switches), per 1,000 tokens: few means every read found events waiting, so the CPU "
        f"per token is that of a busy proxy. Nothing is pinned: the {cores} cores are shared by "
        "backend, load, proxies, the Kafka broker the workers publish to, and whatever else "
        "runs (others).",
        "",
        *table(_HEADER, "lrrrlllllr", [_row(p) for p in result["paths"]]),
    ]
    v = verdicts(result)
    cpu, scale = ratios["cpu_per_token_vs_mitmproxy"], ratios["tokens_per_s_2w_vs_1w"]
    one, plain = paths.get("rollstream-1w", {}), paths.get("mitmproxy", {})
    two = paths.get("rollstream-2w", {})
    lines += [
        "",
        f"- Target proxy CPU per streamed token ≤ {TARGET_CPU_RATIO:.2f} x plain mitmproxy: "
        f"{'met' if v.cpu_met else 'MISSED'} ({_num(one.get('proxy_cpu_us_per_token'), 1)} vs "
        f"{_num(plain.get('proxy_cpu_us_per_token'), 1)} µs: {_x(v.cpu_ratio)}, median of the "
        f"per-round ratios, {_range(cpu)}).",
        f"- Target two workers ≥ {TARGET_SCALING:.1f} x the tokens/s of one: "
        f"{'met' if v.scaling_met else 'MISSED'} ({_num(two.get('tokens_per_s'))} vs "
        f"{_num(one.get('tokens_per_s'))} tokens/s: {_x(v.scaling)}, {_range(scale)}); CPU per "
        f"token with two workers {_x(ratios['cpu_per_token_2w_vs_1w']['median'])} one's.",
        *_bounds(result, cores),
    ]
    if "router_tokens_per_s_vs_direct" in ratios:
        lines.append(
            f"- Through the pool's router instead of straight to the workers: "
            f"{_x(ratios['router_cpu_per_token_vs_direct']['median'])} the proxy CPU per token "
            f"(the router runs in the supervisor), "
            f"{_x(ratios['router_tokens_per_s_vs_direct']['median'])} the tokens/s."
        )
    kafka = result.get("kafka")
    if kafka:
        lines.append(
            f"- Published for real: {kafka['records']:,} CallRecords on the events topic for "
            f"{kafka['calls_through_rollstream']:,} calls through rollstream (warm-ups "
            f"included; statuses {kafka['statuses']})."
        )
    return [*lines, ""]


def _bounds(result: dict[str, Any], cores: int) -> list[str]:
    """What bounds each path, and what the measured costs allow on this machine."""
    cap, paths = result["capacity"], {p["mode"]: p for p in result["paths"]}
    each = "; ".join(f"{name}: {_bound_text(p, cores)}" for name, p in paths.items() if p["bound"])
    lines = [f"- What bounds each path: {each}."]
    if cap.get("backend") and cap.get("rollstream-2w"):
        lines.append(
            f"- At the measured CPU per token, one core carries about {cap['backend']:,} "
            f"tokens/s of the backend, {_num(cap.get('mitmproxy'))} of plain mitmproxy, "
            f"{_num(cap.get('rollstream-1w'))} of one rollstream worker; two workers on two "
            f"cores of their own about {cap['rollstream-2w']:,}. Backend, load and two workers "
            f"together on these {cores} cores: at most {_num(cap.get('machine_2w'))} tokens/s "
            "(upper bounds from CPU time, not measurements)."
        )
    one = paths.get("rollstream-1w", {}).get("tokens_per_s")
    machine = cap.get("machine_2w")
    if one and machine and machine < TARGET_SCALING * one:
        lines.append(
            f"- So {TARGET_SCALING:.1f} x one worker's {one:,.0f} tokens/s is out of reach on "
            f"this machine whatever the pool does: the backend and the load generator need "
            "cores of their own besides the workers' two for that target to be measurable."
        )
    return lines


def summary_row(result: dict[str, Any]) -> str:
    """The summary table's row: CPU per token against plain mitmproxy, and 1 vs 2 workers."""
    paths = {p["mode"]: p for p in result["paths"]}
    v = verdicts(result)
    one, two, plain = paths["rollstream-1w"], paths["rollstream-2w"], paths["mitmproxy"]
    return (
        f"{one['proxy_cpu_us_per_token']} vs {plain['proxy_cpu_us_per_token']} µs proxy CPU per "
        f"streamed token ({_x(v.cpu_ratio)}; target {TARGET_CPU_RATIO:.2f} x "
        f"{'met' if v.cpu_met else 'missed'}); {one['tokens_per_s']:,.0f} tokens/s with one "
        f"worker, {two['tokens_per_s']:,.0f} with two ({_x(v.scaling)}; target "
        f"{TARGET_SCALING:.1f} x {'met' if v.scaling_met else 'missed'}, bound by "
        f"{two['bound']})"
    )
