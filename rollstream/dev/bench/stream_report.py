"""``rollstream bench stream``: its figures from the calls and CPU times, verdicts and section.

Pure functions, so what the benchmark concludes (ratios, targets, what bounds the run) is
tested without running it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

#: One call of the load: session, began, end, SSE events, error kind ("": ok).
StreamCall = tuple[int, float, float, int, str]

TARGET_CPU_RATIO = 1.10  # rollstream's proxy CPU per streamed token over plain mitmproxy's
TARGET_SCALING = 1.8  # two workers' tokens/s over one worker's
SATURATED = 0.9  # a share of a core (or of all cores) from which a party is the bound

#: Figures whose median over the rounds a path reports.
_MEDIAN = (
    "tokens_per_s",
    "proxy_cpu_us_per_token",
    "proxy_wakeups_per_ktoken",
    "proxy_cores",
    "proxy_busiest_cores",
    "proxy_wait_cores",
    "backend_cores",
    "backend_wait_cores",
    "backend_cpu_us_per_token",
    "load_cores",
    "load_cpu_us_per_token",
    "machine_busy_cores",
    "others_cores",
    "events_per_call",
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
    #: Times the proxies' event loops went to sleep and woke up again, per 1,000 tokens: the
    #: fewer, the more events each read found waiting (a busy proxy batches; an idle one does
    #: its per-read work for nearly every event, so its CPU per token is higher).
    proxy_wakeups_per_ktoken: float | None
    proxy_cores: float
    proxy_busiest_cores: float
    #: Time the proxies' (the backend's) threads were runnable but waiting for a core, per
    #: second: CPU they wanted and did not get.
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
        "cpu_per_token_vs_mitmproxy": _ratios(
            series("rollstream-1w", "proxy_cpu_us_per_token"),
            series("mitmproxy", "proxy_cpu_us_per_token"),
        ),
        "cpu_per_token_2w_vs_1w": _ratios(
            series("rollstream-2w", "proxy_cpu_us_per_token"),
            series("rollstream-1w", "proxy_cpu_us_per_token"),
        ),
        "tokens_per_s_2w_vs_1w": _ratios(
            series("rollstream-2w", "tokens_per_s"), series("rollstream-1w", "tokens_per_s")
        ),
    }
    if "rollstream-2w-router" in by_path:
        ratios["router_cpu_per_token_vs_direct"] = _ratios(
            series("rollstream-2w-router", "proxy_cpu_us_per_token"),
            series("rollstream-2w", "proxy_cpu_us_per_token"),
        )
        ratios["router_tokens_per_s_vs_direct"] = _ratios(
            series("rollstream-2w-router", "tokens_per_s"), series("rollstream-2w", "tokens_per_s")
        )
    by = {p["mode"]: p for p in out}
    return {
        "paths": out,
        "ratios": ratios,
        "capacity": capacity(out, cores),
        # Read by the sizing plan (``sizing.py``): one worker's cost per streamed token.
        "rollstream_cpu_us_per_token": by.get("rollstream-1w", {}).get("proxy_cpu_us_per_token"),
        "mitmproxy_cpu_us_per_token": by.get("mitmproxy", {}).get("proxy_cpu_us_per_token"),
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
    if two and all(two[k] for k in ("proxy_cpu_us_per_token", "backend_cpu_us_per_token")):
        total = (
            two["proxy_cpu_us_per_token"]
            + two["backend_cpu_us_per_token"]
            + (two["load_cpu_us_per_token"] or 0)
        )
        out["machine_2w"] = per_s(total, cores)
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
