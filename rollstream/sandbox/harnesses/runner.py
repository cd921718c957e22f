"""Running one harness process: its own HOME, its own process group, a timeout that kills it all.

Harnesses spawn shells and sub-processes of their own (tool calls, sub-agents); killing only the
harness would leave them running, so the run is a process group and the timeout kills the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rollstream.lifecycle import die_with_parent
from rollstream.sandbox.harnesses.presets import HarnessLaunch

#: Variables of the caller's environment a harness may see; everything else (credentials,
#: rollstream settings, proxies) stays out, so runs are isolated and reproducible.
_INHERITED = ("PATH", "LANG", "LC_ALL", "TZ", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")
_TAIL_BYTES = 4000


@dataclass(frozen=True)
class HarnessResult:
    """How a run ended."""

    exit_code: int | None  # None: killed on timeout
    timed_out: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str


def harness_env(launch: HarnessLaunch, home: Path) -> dict[str, str]:
    """The run's whole environment: a few inherited variables, HOME, the preset's own."""
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    env |= {"HOME": str(home), "TERM": "dumb", "NO_COLOR": "1", "TMPDIR": str(home / "tmp")}
    return env | launch.env


def _prepare(launch: HarnessLaunch, home: Path, workdir: Path, logs: Path) -> None:
    write_home(launch, home)
    workdir.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)


def write_home(launch: HarnessLaunch, home: Path) -> None:
    """Create HOME with the preset's config files."""
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    for relative, text in launch.home_files.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


async def run_harness(
    launch: HarnessLaunch, home: Path, workdir: Path, logs: Path, timeout_s: float
) -> HarnessResult:
    """Run ``launch`` in ``workdir`` until it exits or ``timeout_s`` passes.

    Output goes to ``logs/stdout`` and ``logs/stderr`` (files, not pipes: a chatty harness can
    never block on a full pipe); the result carries their tails.
    """
    _prepare(launch, home, workdir, logs)
    started = time.monotonic()
    with (logs / "stdout").open("wb") as out, (logs / "stderr").open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            cwd=workdir,
            env=harness_env(launch, home),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            # Its own session (killed as a group on timeout), yet gone with the node: a node
            # SIGKILLed must not leave harnesses calling for sessions nobody will end.
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL),
        )
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
        finally:
            # Also after a normal exit: tool calls may have left background processes behind.
            await kill_group(proc, grace_s=0 if proc.returncode is not None else 5.0)
    return HarnessResult(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        stdout_tail=tail(logs / "stdout"),
        stderr_tail=tail(logs / "stderr"),
    )


async def kill_group(proc: asyncio.subprocess.Process, grace_s: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL whatever is left of it after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def tail(path: Path) -> str:
    """The last few kilobytes of a log file, decoded leniently (empty if there is none)."""
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(path.stat().st_size - _TAIL_BYTES, 0))
        return f.read().decode(errors="replace")
