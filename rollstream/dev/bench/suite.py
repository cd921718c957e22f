"""``rollstream bench all``: which benchmarks run, in what order, and the run's machine header."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rollstream.dev.bench.common import machine

#: Every benchmark ``bench all`` runs, in order; names without a ``bench`` subcommand (yet)
#: are skipped.
ORDER = (
    "backend",
    "interceptor",
    "stream",
    "node",
    "wall",
    "reconstruct",
    "publisher",
    "outage",
    "state",
    "cluster",
    "pipeline",
    "instances",
    "scale",
    "long-session",
    "console",
    "fidelity",
)


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def record_run(
    results_path: Path, ran: list[str], failed: list[str], seconds: float
) -> dict[str, Any]:
    """Store what ``bench all`` ran, and on what, in the JSON results file; return its data."""
    data: dict[str, Any] = {}
    if results_path.exists():
        data = json.loads(results_path.read_text())
    data["all"] = machine() | {
        "memory_gb": _memory_gb(),
        "ran": ran,
        "failed": failed,
        "minutes": round(seconds / 60, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def header_lines(data: dict[str, Any]) -> list[str]:
    """The machine description at the top of RESULTS.md, from the last ``bench all``."""
    run = data.get("all")
    if not run:
        return []
    memory = f", {run['memory_gb']} GB RAM" if run.get("memory_gb") else ""
    lines = [
        f"Machine: {run.get('cpu', '?')}, {run.get('cores', '?')} cores{memory}; "
        f"{run.get('platform', '?')}; Python {run.get('python', '?')}.",
        "",
        f"`rollstream bench all` ran {', '.join(run.get('ran', [])) or 'nothing'} one after "
        f"another with their default configurations, finishing {run.get('finished', '?')} "
        f"({run.get('minutes', '?')} min). Each section names the machine and time of its own "
        "last run.",
        "",
    ]
    if run.get("failed"):
        lines[-2] += f" Failed (sections left from earlier runs): {', '.join(run['failed'])}."
    return lines
