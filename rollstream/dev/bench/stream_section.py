"""The ``bench stream`` section of RESULTS.md and its row in the summary table."""

from __future__ import annotations

from typing import Any

from rollstream.dev.bench.stream_report import TARGET_CPU_RATIO, TARGET_SCALING, verdicts


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
        "| path | tokens/s | proxy CPU µs/token | proxy loop wake-ups per 1k tokens "
        "| proxy cores (busiest process) | backend cores (µs/token) | waiting for a core: "
        "proxy / backend | load cores (µs/token) | machine busy / others (cores) "
        "| calls (errors) |",
        "|---|---:|---:|---:|---|---|---|---|---|---:|",
    ]
    for p in result["paths"]:
        low, high = p["tokens_per_s_range"] or (None, None)
        lines.append(
            f"| {p['mode']} | {_num(p['tokens_per_s'])} ({_num(low)} to {_num(high)}) "
            f"| {_num(p['proxy_cpu_us_per_token'], 1)} | {_num(p['proxy_wakeups_per_ktoken'])} "
            f"| {p['proxy_cores']:.2f} ({p['proxy_busiest_cores']:.2f}) "
            f"| {p['backend_cores']:.2f} ({_num(p['backend_cpu_us_per_token'], 1)}) "
            f"| {p['proxy_wait_cores']:.2f} / {p['backend_wait_cores']:.2f} "
            f"| {p['load_cores']:.2f} ({_num(p['load_cpu_us_per_token'], 1)}) "
            f"| {p['machine_busy_cores']:.2f} / {p['others_cores']:.2f} "
            f"| {p['calls_ok']:,} ({p['errors']}) |"
        )
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
