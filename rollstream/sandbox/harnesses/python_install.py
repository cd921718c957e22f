"""Installing the pinned Python harnesses from PyPI, each in a virtualenv of its own.

A Python harness brings its own dependencies (litellm, pydantic, datasets, ...) at versions
that need not agree with rollstream's or with one another's, so each gets a venv under the
cache, named by its pins: a new pin set gets a new venv. A venv counts as installed once its
executable is there and a marker file, written last, says so; an interrupted install is
removed and made again. Downloads go to the cache's pip directory, so a reinstall needs no
network.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from rollstream.errors import ConfigurationError
from rollstream.host import exclusive
from rollstream.sandbox.harnesses.install import HarnessInstallError

log = logging.getLogger(__name__)

#: PyPI requirements of each Python harness, pinned; the executable its venv gets (the venv's
#: Python for a harness that is a library: rollstream runs its own driver script with it).
PYTHON_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "mini-swe-agent": (("mini-swe-agent==2.4.6",), "mini"),
    # One pip call: the tools alone would pull an older sdk than the one pinned.
    "openhands": (("openhands-sdk==1.58.2", "openhands-tools==1.58.2"), "python"),
    "aider": (("aider-chat==0.86.2",), "aider"),
    # Harbor's Terminus-2 agent: a library, run by rollstream's driver.
    "terminus-2": (("harbor==0.26.0",), "python"),
}
_COMPLETE_MARKER = ".rollstream-complete"


def venv_dir(name: str, cache_dir: Path) -> Path:
    """Where harness ``name``'s venv lives for its current pins."""
    pins = PYTHON_PACKAGES[name][0]
    key = hashlib.sha256("\n".join(sorted(pins)).encode()).hexdigest()[:12]
    return cache_dir / "harnesses" / "python" / f"{name}-{key}"


def python_executable(name: str, cache_dir: Path) -> Path | None:
    """The installed executable of Python harness ``name``; None if it is not installed."""
    if name not in PYTHON_PACKAGES:
        raise ConfigurationError(
            f"unknown Python harness {name!r}; known: {', '.join(PYTHON_PACKAGES)}"
        )
    root = venv_dir(name, cache_dir)
    return root / "bin" / PYTHON_PACKAGES[name][1] if (root / _COMPLETE_MARKER).exists() else None


def install_python(name: str, cache_dir: Path, python: str = sys.executable) -> Path:
    """Install Python harness ``name`` unless it is there; its executable.

    One process at a time per harness (a lock under the cache): a second waits and finds the
    first's venv.
    """
    done = python_executable(name, cache_dir)
    if done is not None:
        return done
    root = venv_dir(name, cache_dir)
    with exclusive(root.with_name(root.name + ".lock")):
        done = python_executable(name, cache_dir)
        if done is not None:
            return done
        if root.exists():  # an install that was interrupted
            shutil.rmtree(root)
        pins, exe = PYTHON_PACKAGES[name]
        log.info("installing %s into %s", ", ".join(pins), root)
        steps = [
            [python, "-m", "venv", str(root)],
            [
                str(root / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--cache-dir",
                str(cache_dir / "pip"),
                *pins,
            ],
        ]
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
                raise HarnessInstallError(f"installing {' '.join(pins)} failed:\n{tail}")
        if not (root / "bin" / exe).exists():
            raise HarnessInstallError(f"{' '.join(pins)} installed no {exe} executable")
        (root / _COMPLETE_MARKER).write_text("\n".join(pins) + "\n")
    return root / "bin" / exe
