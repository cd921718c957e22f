"""What a process can connect to: run as ``python -m tests.network_probe name=host:port ...``.

Prints one JSON object, each name mapped to ``open`` (a TCP connect succeeded) or the error's
name (``ConnectionRefusedError``, ``OSError``...). Walled processes run it to show what they
reach; ``probe_command`` builds its command line for a shell-run harness or scorer command.
"""

from __future__ import annotations

import json
import shlex
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def reach(host: str, port: int, timeout: float = 3.0) -> str:
    """``open``, or the name of the error a TCP connect to ``host:port`` gave."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return "open"
    except OSError as exc:
        return type(exc).__name__


def probe_command(targets: Mapping[str, tuple[str, int]], out: str | None = "probe.json") -> str:
    """A shell command running this probe on ``targets``, its JSON into ``out`` (or stdout)."""
    args = [f"{name}={host}:{port}" for name, (host, port) in targets.items()]
    argv = [sys.executable, "-m", "tests.network_probe", *args]
    redirect = f' > "$OLDPWD"/{out}' if out else ""
    return f"(cd {shlex.quote(str(REPO_ROOT))} && {shlex.join(argv)}{redirect})"


def main(argv: list[str]) -> None:
    """Probe each ``name=host:port`` and print the results as JSON."""
    results = {}
    for arg in argv:
        name, _, address = arg.partition("=")
        host, _, port = address.rpartition(":")
        results[name] = reach(host, int(port))
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
