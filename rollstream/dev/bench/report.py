"""The sections of RESULTS.md, one per benchmark result (``SECTIONS``), rendered from its JSON."""

from __future__ import annotations

from typing import Any

from rollstream.dev.bench.cluster_report import cluster_section
from rollstream.dev.bench.fidelity_report import fidelity_section
from rollstream.dev.bench.instances_report import instances_section
from rollstream.dev.bench.long_stack import long_stack_section
from rollstream.dev.bench.outage import outage_section
from rollstream.dev.bench.pipeline_report import pipeline_section
from rollstream.dev.bench.publisher_report import publisher_section
from rollstream.dev.bench.reconstruct_long import long_sessions_section
from rollstream.dev.bench.scale_report import scale_section
from rollstream.dev.bench.state import state_section
from rollstream.dev.bench.stream_section import stream_section
from rollstream.dev.bench.summary import INTERCEPTOR_CPU_TARGET
from rollstream.dev.bench.wall_report import wall_section

BACKEND_TARGETS = {"tokens_per_s": 2000, "concurrent_streams": 200}
RECONSTRUCT_TARGETS = {"calls_per_s": 1000, "sessions_per_s": 100, "latency_p99_ms": 500}


def _backend_section(result: dict[str, Any]) -> list[str]:
    config, levels = result["config"], result["levels"]
    best = max(levels, key=lambda level: level["tokens_per_s"])
    clean = [level["concurrency"] for level in levels if level["errors"] == 0]
    lines = [
        "## Reference backend (`rollstream bench backend`)",
        "",
        f"Server pinned to one core, {config['policy']} policy, {config['max_tokens']} tokens "
        f"per stream, latency model {config['ttft_ms']} ms TTFT + {config['tpot_ms']} ms per "
        "token; load generator on the other core.",
        "",
        "| streams | tokens/s | errors | TTFT p50 / p99 (ms) | inter-token p50 / p99 (ms) "
        "| server CPU µs/token | server CPU | RSS MB |",
        "|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for level in levels:
        lines.append(
            f"| {level['concurrency']} | {level['tokens_per_s']:.0f} | {level['errors']} "
            f"| {level['ttft_p50_ms']} / {level['ttft_p99_ms']} "
            f"| {level['itl_p50_ms']} / {level['itl_p99_ms']} "
            f"| {level['server_cpu_us_per_token']} | {level['server_cpu_utilisation']:.0%} "
            f"| {level['server_rss_mb']} |"
        )
    met_rate = best["tokens_per_s"] >= BACKEND_TARGETS["tokens_per_s"]
    met_streams = max(clean, default=0) >= BACKEND_TARGETS["concurrent_streams"]
    lines += [
        "",
        f"- Target ≥ {BACKEND_TARGETS['tokens_per_s']} streamed tokens/s: "
        f"{'met' if met_rate else 'MISSED'} ({best['tokens_per_s']:.0f} at "
        f"{best['concurrency']} streams).",
        f"- Target ≥ {BACKEND_TARGETS['concurrent_streams']} concurrent streams without errors: "
        f"{'met' if met_streams else 'MISSED'} (largest clean level: {max(clean, default=0)}).",
        "",
    ]
    return lines


def _interceptor_section(result: dict[str, Any]) -> list[str]:
    config = result["config"]
    on_vllm = result.get("engine") == "vllm"
    latency = (
        "upstream: a real vLLM serving qwen3's tiny model on the CPU build, its own latency "
        "(not pinned: its threads share the proxy's core)"
        if on_vllm
        else f"backend latency {config['ttft_ms']} ms + {config['tpot_ms']} ms/token"
    )
    # Results from before the rounds alternated their order (no "order") ran each round in
    # the same order; the section says which.
    order = (
        "alternating the paths' order (ABBA)"
        if result.get("order") == "abba"
        else "each measuring the paths in the same order"
    )
    lines = [
        "## Interceptor in front of vLLM (`rollstream bench interceptor --engine vllm`)"
        if on_vllm
        else "## Interceptor (`rollstream bench interceptor`)",
        "",
        f"Same upstream reached three ways, one run, {config.get('rounds', 1)} rounds {order} "
        f"(figures: medians over the rounds). CPU per call: the proxy process's CPU time "
        f"(pinned to its own core) over {config['calls']} streamed chat calls with a "
        f"{result['prompt_tokens_measured']}-token prompt and 16 output tokens, "
        f"{config['call_concurrency']} at a time. TTFT: {config['streams']} concurrent streams, "
        f"{config.get('stream_rounds', 1)} calls each in a row, starts spread over one call's "
        f"duration (steady state; each stream's first call, which opens its connection, not "
        f"counted); {latency}.",
        "",
        "| path | proxy CPU ms/call | proxy CPU idle (ms/s) | call p50 (ms) "
        "| TTFT p50 / p99 (ms) | errors | proxy RSS MB |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for m in result["modes"]:
        idle = m.get("proxy_idle_cpu_ms_per_s")
        lines.append(
            f"| {m['mode']} | {m['proxy_cpu_ms_per_call']} | {'-' if idle is None else idle} "
            f"| {m['call_latency_p50_ms']} | {m['ttft_p50_ms']} / {m['ttft_p99_ms']} "
            f"| {m['errors']} | {m['proxy_rss_mb']} |"
        )
    ratio, added = result["cpu_ratio_vs_mitmproxy"], result["added_ttft_p50_ms"]
    by_mode = {m["mode"]: m["proxy_cpu_ms_per_call"] for m in result["modes"]}
    lines += [
        "",
        f"- Target CPU per call ≤ {INTERCEPTOR_CPU_TARGET} x plain mitmproxy: "
        f"{'met' if ratio is not None and ratio <= INTERCEPTOR_CPU_TARGET else 'MISSED'} "
        f"(median {ratio} x over "
        f"{config.get('rounds', 1)} rounds; range "
        f"{' to '.join(str(r) for r in result.get('cpu_ratio_range') or [ratio])} x).",
        f"- Target added TTFT p50 ≤ 10 ms over direct: "
        f"{'met' if added <= 10 else 'MISSED'} ({added} ms).",
        "",
    ]
    costs = result.get("own_work_ms_per_call")
    if costs:
        steps = ", ".join(f"{k} {v}" for k, v in costs.items() if k != "total")
        extra = by_mode["rollstream"] - by_mode["mitmproxy"]
        lines += [
            f"Profile of rollstream's share ({extra:.2f} ms/call more than plain mitmproxy): its "
            f"pure steps, run in-process on the bytes the backend streamed for this call, take "
            f"{costs['total']} ms ({steps}; ms). `stream` is mostly the first chunk, which "
            f"carries the prompt's token ids; `record` packs ids and delta-encodes and "
            f"compresses the requests. Inside the proxy the same steps cost about twice to five "
            f"times as much as in this tight loop (each read runs after mitmproxy's own code "
            f"has taken the caches), and the Kafka producer works in the same process. Idle "
            f"CPU: the proxy's while no call arrives, over {config.get('idle_s', 0)} s after "
            f"each load (timers and background Kafka clients; a proxy that wakes often pays "
            f"for it on every call too).",
            "",
        ]
    return lines


def _reconstruct_section(result: dict[str, Any]) -> list[str]:
    config, throughput = result["config"], result["throughput"]
    lines = [
        "## Reconstruction (`rollstream bench reconstruct`)",
        "",
        f"Throughput per process, in-process without Kafka: {throughput['sessions']} synthetic "
        f"sessions of {throughput['calls_per_session']} calls, prompts growing from "
        f"{throughput['prompt_tokens_first']:,} to {throughput['prompt_tokens_last']:,} tokens, "
        "delta-encoded against the previous call as the interceptor writes them. Timed per "
        "session: Avro decode of its records, PartitionBuffers, build_trajectory (delta "
        "resolution and the strategy), Avro encode of the trajectory; median of "
        f"{config['rounds']} rounds (range in brackets).",
        "",
        "| strategy | calls/s | ms/call: decode / buffer / build / encode | segments/session |",
        "|---|---:|---|---:|",
    ]
    for s in throughput["strategies"]:
        ms = s["ms_per_call"]
        low, high = s["calls_per_s_range"]
        lines.append(
            f"| {s['strategy']} | {s['calls_per_s']:,} ({low:,} to {high:,}) "
            f"| {ms['decode']} / {ms['buffer']} / {ms['build']} / {ms['encode']} "
            f"| {s['segments_per_session']} |"
        )
    slowest = min(throughput["strategies"], key=lambda s: s["calls_per_s"])
    met = slowest["calls_per_s"] >= RECONSTRUCT_TARGETS["calls_per_s"]
    lines += [
        "",
        f"- Target ≥ {RECONSTRUCT_TARGETS['calls_per_s']:,} calls/s per process: "
        f"{'met' if met else 'MISSED'} (slowest: {slowest['strategy']} at "
        f"{slowest['calls_per_s']:,} calls/s).",
        "",
    ]
    e2e = result.get("end_to_end")
    if e2e is None:
        return [*lines, "End to end through Kafka: not run.", ""]
    lines += [
        f"End to end through Kafka: the reconstructor service (`rollstream reconstruct "
        f"--strategy {e2e['strategy']}`, its own process) on a {e2e['partitions']}-partition "
        f"events topic; {e2e['sessions']} sessions of {e2e['calls_per_session']} calls "
        f"(prompts up to {e2e['prompt_tokens_last']:,} tokens) produced at "
        f"{e2e['rate_target']:g} sessions/s, each session's records spread over "
        f"{config['session_spread_s']:g} s so sessions overlap. Latency per session: from "
        "handing its SessionEnded to the producer (linger 5 ms) until its trajectory reaches a "
        "`read_committed` consumer. Broker, service and load generator share the machine.",
        "",
        "| sessions/s achieved | trajectories | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) "
        "| service CPU | service RSS MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {e2e['rate_achieved']} | {e2e['trajectories']} of {e2e['sessions']} "
        f"| {e2e['latency_p50_ms']} | {e2e['latency_p90_ms']} | {e2e['latency_p99_ms']} "
        f"| {e2e['latency_max_ms']} | {e2e['service_cpu_utilisation']:.0%} "
        f"| {e2e['service_rss_mb']} |",
        "",
    ]
    rate_ok = (
        e2e["rate_target"] >= RECONSTRUCT_TARGETS["sessions_per_s"]
        and e2e["rate_achieved"] >= 0.95 * RECONSTRUCT_TARGETS["sessions_per_s"]
    )
    met = (
        rate_ok
        and e2e["missing"] == 0
        and e2e["latency_p99_ms"] <= RECONSTRUCT_TARGETS["latency_p99_ms"]
    )
    lines += [
        f"- Target SessionEnded → trajectory p99 ≤ {RECONSTRUCT_TARGETS['latency_p99_ms']} ms "
        f"at {RECONSTRUCT_TARGETS['sessions_per_s']} sessions/s: {'met' if met else 'MISSED'} "
        f"(p99 {e2e['latency_p99_ms']} ms at {e2e['rate_achieved']} sessions/s, "
        f"{e2e['missing']} trajectories missing).",
        "",
    ]
    return lines


def _runtime_lines(result: dict[str, Any]) -> list[str]:
    """The sandbox start costs and the docker runtime against the local one, where measured."""
    costs = result.get("start_cost") or []
    lines = []
    if costs:
        each = "; ".join(
            f"{c['runtime']} {c['start_ms']} / {c['stop_ms']} ms (max {c['start_ms_max']} / "
            f"{c['stop_ms_max']})"
            for c in costs
        )
        lines.append(
            f"- A sandbox's start / removal, one at a time (median of {costs[0]['probes']}): "
            f"{each}. The docker runtime's start is a container's create and start (its image "
            f"checked first), its removal a forced remove."
        )
    docker = (result.get("by_runtime") or {}).get("docker")
    if docker:
        mode = {(m["runtime"], m["mode"]): m for m in result["modes"]}
        local, warm = mode[("local", "prewarm")], mode[("docker", "prewarm")]
        low, high = docker["speedup_range"] or [None, None]
        ratio = round(warm["sessions_per_min"] / local["sessions_per_min"], 2)
        extra = {
            stage: round(warm["stage_mean_s"][stage] - local["stage_mean_s"][stage], 2)
            for stage in ("init", "run", "post")
        }
        lines.append(
            f"- Docker runtime: pre-warming gives {docker['speedup']} x its sessions/min without "
            f"({low} to {high} x; the pool's containers were up before each round's clock); "
            f"pre-warmed, it reaches {ratio} x the local runtime's sessions/min. Its stages take "
            f"longer than the local ones for the same sleeps (init +{extra['init']} s, run "
            f"+{extra['run']} s, post-run +{extra['post']} s): the setup and the harness each "
            f"run as a `docker exec` (create, start, stream, inspect) and a clean-up exec follows "
            f"the harness; post-run removes the container."
        )
    return lines


def _node_section(result: dict[str, Any]) -> list[str]:
    config, modes = result["config"], result["modes"]
    by_mode = {m["mode"]: m for m in modes if m.get("runtime", "local") == "local"}
    cold, warm = by_mode["no_prewarm"], by_mode["prewarm"]
    bound = result.get("bound_per_min", {})
    lines = [
        "## Rollout node (`rollstream bench node`)",
        "",
        f"One `NodeScheduler`, runtimes {', '.join(config.get('runtimes', ['local']))} "
        f"(interleaved in the same rounds), `command` harness; limits max_init="
        f"{config['max_init']}, max_run={config['max_run']}, max_post={config['max_post']}; "
        f"prewarm=0 against prewarm={config['prewarm']} in one run, {config['rounds']} rounds "
        f"alternating them (ABBA), each round a fresh scheduler and one task of "
        f"{config['sessions']} samples submitted at once. A session's init: its directory, an "
        f"inline workspace of {config['files']} files of ~{config['file_bytes']} bytes, setup "
        f"`sleep {config['setup_s']:g}`, the git baseline; its run: `sleep {config['run_s']:g}; "
        f"echo done > out.txt`; post-run: the workspace diff and SessionEnded. emit and "
        f"calls_of are local (no Kafka, no interceptor). sessions/min: sessions over the wall "
        f"time from submit to the last SessionEnded, median over the rounds (range). Latency: "
        f"a session's init start to its post-run end (the burst's intake queue not counted), "
        f"pooled over the rounds. Stage times: means (median over the rounds); ready: init end "
        f"to run start. Peaks: the scheduler's meter; slots: sessions between init start and "
        f"run end. Run slots idle: run-pool time with no harness running, from the first run's "
        f"start to the last's end; starved: the part of it while sessions were still waiting "
        f"to run.",
        "",
        "| runtime | prewarm | sessions/min | sessions (errors) | latency mean / p50 / p99 (s) "
        "| init / ready / run / post (s) | peak init / ready / run / post | peak slots "
        "| run slots idle / starved |",
        "|---|---:|---:|---:|---|---|---|---:|---|",
    ]
    for m in modes:
        low, high = m["sessions_per_min_range"]
        st, pk = m["stage_mean_s"], m["peak"]
        lines.append(
            f"| {m.get('runtime', 'local')} | {m['prewarm']} | {m['sessions_per_min']} "
            f"({low} to {high}) "
            f"| {m['completed']} of {m['sessions']} ({m['errors']}) "
            f"| {m['latency_mean_s']} / {m['latency_p50_s']} / {m['latency_p99_s']} "
            f"| {st['init']} / {st['ready']} / {st['run']} / {st['post']} "
            f"| {pk['init']} / {pk['ready']} / {pk['run']} / {pk['post']} | {m['slots_peak']} "
            f"| {m['run_idle_share']:.0%} / {m['run_starved_share']:.0%} |"
        )
    low, high = result["speedup_range"] or [None, None]
    held = all(
        m["peak"]["init"] <= config["max_init"]
        and m["peak"]["run"] <= config["max_run"]
        and m["peak"]["post"] <= config["max_post"]
        and m["slots_peak"] <= config["max_run"] + m["prewarm"]
        for m in modes
    )
    lines += [
        "",
        f"- Pre-warming: {result['speedup']} x the sessions/min of prewarm=0 (median of the "
        f"per-round ratios, {low} to {high} x); run slots starved {cold['run_starved_share']:.0%}"
        f" without it, {warm['run_starved_share']:.0%} with it.",
        f"- Limits (measured peaks within max_init, max_run, max_post, and sessions holding a "
        f"slot within max_run + prewarm): {'held' if held else 'EXCEEDED'}.",
        *_runtime_lines(result),
    ]
    if warm["stage_mean_s"]["ready"] < 0.05 * warm["stage_mean_s"]["run"]:
        lines.append(
            "- Sessions hardly wait ready even with pre-warming: the init pool delivers them "
            "about as fast as the run pool takes them, so the gain is init overlapping run "
            "(a session's init done while the previous one in its run slot still runs), not a "
            "stock of ready runtimes; a larger max_init would build one."
        )
    lines += [
        f"- What bounds each: without pre-warming a session's init starts only when a run slot "
        f"is free, so each run slot carries init then run in series: at the measured stage "
        f"times a steady stream would reach {bound.get('no_prewarm', '?')} sessions/min. With "
        f"pre-warming init runs ahead on its own pool and the bound is the slower of the init "
        f"pool and the run pool: {bound.get('prewarm', '?')} sessions/min. A burst stays below "
        f"both by its start (the first inits, with nothing to run yet) and its tail.",
        "- What it does not say: pre-warming does not make a session faster (its latency "
        "includes any wait ready); it keeps the run pool busy. The gain depends on init time "
        "against run time: here they are comparable on purpose. With real harnesses running "
        "for minutes against a model, the gain is the init share of each run slot's cycle; "
        "these sleeps measure the scheduler's overlap and this machine's process and git "
        "overhead, not a harness or a model.",
        "",
    ]
    return lines


def _reconstruct_and_long_section(result: dict[str, Any]) -> list[str]:
    return [*_reconstruct_section(result), *long_sessions_section(result.get("long_sessions"))]


SECTIONS = {
    "backend": _backend_section,
    "interceptor": _interceptor_section,
    "interceptor-vllm": _interceptor_section,
    "node": _node_section,
    "reconstruct": _reconstruct_and_long_section,
    "publisher": publisher_section,
    "outage": outage_section,
    "state": state_section,
    "cluster": cluster_section,
    "pipeline": pipeline_section,
    "instances": instances_section,
    "scale": scale_section,
    "stream": stream_section,
    "fidelity": fidelity_section,
    "fidelity-vllm": fidelity_section,
    "wall": wall_section,
    "long-session": long_stack_section,
}
