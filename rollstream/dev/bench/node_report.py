"""The ``bench node`` section of RESULTS.md."""

from __future__ import annotations

from typing import Any

from rollstream.dev.bench.node import STAGES
from rollstream.dev.bench.runner import table


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


def node_section(result: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: each runtime and mode over the rounds, and what bounds them."""
    config, modes = result["config"], result["modes"]
    by_mode = {m["mode"]: m for m in modes if m.get("runtime", "local") == "local"}
    cold, warm = by_mode["no_prewarm"], by_mode["prewarm"]
    bound = result.get("bound_per_min", {})
    rows = [
        (
            m.get("runtime", "local"),
            m["prewarm"],
            "{} ({} to {})".format(m["sessions_per_min"], *m["sessions_per_min_range"]),
            f"{m['completed']} of {m['sessions']} ({m['errors']})",
            f"{m['latency_mean_s']} / {m['latency_p50_s']} / {m['latency_p99_s']}",
            " / ".join(str(m["stage_mean_s"][stage]) for stage in STAGES),
            " / ".join(str(m["peak"][stage]) for stage in STAGES),
            m["slots_peak"],
            f"{m['run_idle_share']:.0%} / {m['run_starved_share']:.0%}",
        )
        for m in modes
    ]
    header = ["runtime", "prewarm", "sessions/min", "sessions (errors)"]
    header += ["latency mean / p50 / p99 (s)", "init / ready / run / post (s)"]
    header += ["peak init / ready / run / post", "peak slots", "run slots idle / starved"]
    low, high = result["speedup_range"] or [None, None]
    held = all(
        m["peak"]["init"] <= config["max_init"]
        and m["peak"]["run"] <= config["max_run"]
        and m["peak"]["post"] <= config["max_post"]
        and m["slots_peak"] <= config["max_run"] + m["prewarm"]
        for m in modes
    )
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
        *table(header, "lrrrlllrl", rows),
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
