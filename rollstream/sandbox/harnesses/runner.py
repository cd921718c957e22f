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
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rollstream.lifecycle import die_with_parent
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.netns import (
    Wall,
    WallError,
    channel_pair,
    enter_wall,
    preexec,
    received_listener,
)
from rollstream.sandbox.outputs import OutputError, read_tail
from rollstream.sandbox.relay import PortRelay
from rollstream.subprocesses import spawn

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
    launch: HarnessLaunch,
    home: Path,
    workdir: Path,
    logs: Path,
    timeout_s: float,
    wall: Wall | None = None,
) -> HarnessResult:
    """Run ``launch`` in ``workdir`` until it exits or ``timeout_s`` passes.

    Output goes to ``logs/stdout`` and ``logs/stderr`` (files, not pipes: a chatty harness can
    never block on a full pipe); the result carries their tails. With a ``wall`` the process
    runs in network namespaces of its own (``netns.py``), reaching ``wall.reach`` alone.
    """
    _prepare(launch, home, workdir, logs)
    with channel_pair() as (parent_end, child_end):
        steps = []
        port = wall.reach.port if wall is not None and wall.reach is not None else None
        if wall is not None:
            steps.append(functools.partial(enter_wall, child_end.fileno(), port))
        # Its own session (killed as a group on timeout), yet gone with the node: a node
        # SIGKILLed must not leave harnesses calling for sessions nobody will end. After the
        # wall: changing namespaces may reset the parent-death signal.
        steps.append(functools.partial(die_with_parent, signal.SIGKILL))
        started = time.monotonic()
        with (logs / "stdout").open("wb") as out, (logs / "stderr").open("wb") as err:
            try:
                proc = await spawn(
                    *launch.argv,
                    cwd=workdir,
                    env=harness_env(launch, home),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=preexec(*steps),
                    pass_fds=(child_end.fileno(),) if port is not None else (),
                )
            except subprocess.SubprocessError as exc:
                # Only our preexec steps raise this: the namespaces were refused.
                raise WallError(f"could not wall off {launch.argv[0]}: {exc}") from exc
            relay = None
            timed_out = False
            try:
                if wall is not None and wall.reach is not None:
                    relay = PortRelay(received_listener(parent_end), wall.reach)
                    await relay.start()
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                timed_out = True
            finally:
                # Also after a normal exit: tool calls may have left background processes.
                await kill_group(proc, grace_s=0 if proc.returncode is not None else 5.0)
                if relay is not None:
                    await relay.stop()
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
    """The last few kilobytes of a log file, decoded leniently (empty if there is none).

    A link the process put in its log's place is not followed (``outputs.py``): the tail
    reaches errors and the scorer's records.
    """
    try:
        content, _ = read_tail(path, _TAIL_BYTES)
    except FileNotFoundError:
        return ""
    except (OutputError, OSError) as exc:
        return f"[output not read: {exc}]"
    return content.decode(errors="replace")
