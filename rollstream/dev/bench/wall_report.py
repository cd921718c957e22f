"""The ``bench wall`` section of RESULTS.md."""

from __future__ import annotations

from typing import Any

#: (key, label, unit)
_ROWS = (
    ("start_ms", "a harness process from spawn to exit", "ms"),
    ("round_trip_p50_us", "round trip of {size} bytes on one connection, p50", "µs"),
    ("round_trip_p99_us", "the same, p99", "µs"),
    ("connect_us", "a new connection and one byte back", "µs"),
    ("bulk_mb_per_s", "bulk, one way ({bulk} MB)", "MB/s"),
)


def wall_section(result: dict[str, Any]) -> list[str]:
    """Direct against walled, medians and their ratio."""
    config, modes, ratio = result["config"], result["modes"], result["walled_over_direct"]
    lines = [
        "## Network wall (`rollstream bench wall`)",
        "",
        "What the network wall of a session costs (docs/security.md): a process started by "
        "`run_harness` in user and network namespaces of its own with the relay to one endpoint, "
        f"against one started without ({config['starts']} starts of `true` per round), and the "
        "relay's traffic against connecting straight to the same echo server on loopback "
        f"({config['exchanges']:,} round trips, {config['connections']} connections, "
        f"{config['bulk_mb']} MB one way per round). Client, relay and server share this "
        f"process's event loop, as the node's relay shares the node's. Median of "
        f"{config['rounds']} rounds alternating the modes.",
        "",
        "| measure | direct | walled | walled / direct |",
        "|---|---:|---:|---:|",
    ]
    for key, label, unit in _ROWS:
        text = label.format(size=config["message_bytes"], bulk=config["bulk_mb"])
        lines.append(
            f"| {text} | {modes['direct'][key]:,} {unit} | {modes['walled'][key]:,} {unit} "
            f"| {ratio[key]} |"
        )
    lines += [
        "",
        "A harness call costs the model seconds; the relay's tens of microseconds per round trip "
        "and its bulk rate (hundreds of MB/s, against a stream of tokens at tens of kB/s) are "
        "far below what a session can notice.",
        "",
    ]
    return lines
