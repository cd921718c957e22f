"""Where a session runs: its directories (HOME, workspace, logs) and how processes start in it.

``LocalRuntime`` (the default) gives each session a temporary directory with ``home/``,
``work/`` and ``logs/`` and runs every process (setup commands, the harness) in a process group
of its own through ``rollstream.sandbox.harnesses.runner``, so a timeout or a cancellation kills
everything the process started. ``DockerRuntime`` runs the same processes in a container per
session (``node/docker.py``), with the same directories bind-mounted at the same paths.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rollstream.errors import ConfigurationError, RollstreamError
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.harnesses.runner import HarnessResult, run_harness
from rollstream.sandbox.netns import Wall, wall_problem

log = logging.getLogger(__name__)

#: The shell every script of ours runs in (a session's setup, the diff, a scorer's check): no
#: profile or rc file, which on Debian resets PATH and could run the session's own code first.
SHELL = ("bash", "--noprofile", "--norc")
#: Like a CI step: stop at the first failing command.
_SETUP_SHELL = (*SHELL, "-eo", "pipefail", "-c")
_ERROR_TAIL = 1000


@dataclass(frozen=True)
class Sandbox:
    """One session's place: a root directory holding ``home/``, ``work/`` and ``logs/``."""

    session_id: str
    root: Path

    @property
    def home(self) -> Path:
        """The session's HOME (harness config and session files go there)."""
        return self.root / "home"

    @property
    def work(self) -> Path:
        """The workspace: the current directory of every process of the session."""
        return self.root / "work"

    @property
    def logs(self) -> Path:
        """Output of the setup commands and the harness, and the workspace diff."""
        return self.root / "logs"


class Runtime(Protocol):
    """Creates sandboxes, runs processes in them, removes them."""

    name: str
    #: Whether ``execute`` builds the walls it is asked for (else they run on the host network).
    walls: bool

    async def start(self, session_id: str, image: str | None = None) -> Sandbox:
        """A new sandbox for ``session_id``, its directories created.

        ``image``: the task's container image, where the runtime has containers (else unused).
        """
        ...

    async def execute(
        self,
        sandbox: Sandbox,
        launch: HarnessLaunch,
        timeout_s: float,
        logs: Path,
        wall: Wall | None = None,
    ) -> HarnessResult:
        """Run ``launch`` in ``sandbox.work`` with ``sandbox.home``; output into ``logs``.

        The process and everything it starts are killed when ``timeout_s`` passes (the result
        says ``timed_out``) or when the calling task is cancelled. ``wall``: policy-written code
        runs behind it (its own network, reaching ``wall.reach`` alone) when ``walls`` is on.
        """
        ...

    async def stop(self, sandbox: Sandbox) -> None:
        """Remove the sandbox (unless kept for debugging)."""
        ...

    async def fill(self) -> None:
        """Have ready what sessions will start from (pre-warmed containers), then return."""
        ...

    async def close(self) -> None:
        """Release what the runtime keeps between sessions (pre-warmed containers)."""
        ...


class LocalRuntime:
    """Sessions in temporary directories on this machine, each process in its own group.

    With ``walls``, processes asked to run behind a wall get network namespaces of their own
    (``netns.py``); construction checks that this machine allows them and otherwise refuses
    with a ConfigurationError naming ``chosen_by`` (the setting that turns walls off).
    """

    name = "local"

    def __init__(
        self,
        root: Path | None = None,
        keep: bool = False,
        *,
        walls: bool = False,
        chosen_by: str = "the isolation setting",
    ) -> None:
        self.root = root
        self.keep = keep
        self.walls = walls
        if walls:
            problem = wall_problem()
            if problem is not None:
                raise ConfigurationError(
                    f"network isolation of sessions is on, but {problem}. Grant it (Compose: "
                    f"cap_add SYS_ADMIN) or set {chosen_by}=none to run policy code on the "
                    "host's network (it can then reach the broker and every control plane)"
                )

    async def start(self, session_id: str, image: str | None = None) -> Sandbox:
        """A fresh ``rollstream-<session>-*`` directory under ``root`` (default: temp dir).

        ``image`` is not used: local processes run on this machine as it is.
        """
        return self._make_sandbox(session_id, f"rollstream-{session_id}-")

    def _make_sandbox(self, session_id: str, prefix: str) -> Sandbox:
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
        sandbox = Sandbox(session_id, path)
        for folder in (sandbox.home, sandbox.work, sandbox.logs):
            folder.mkdir()
        return sandbox

    async def execute(
        self,
        sandbox: Sandbox,
        launch: HarnessLaunch,
        timeout_s: float,
        logs: Path,
        wall: Wall | None = None,
    ) -> HarnessResult:
        """``run_harness``: isolated environment, HOME files, process group, timeout, wall."""
        wall = wall if self.walls else None
        return await run_harness(launch, sandbox.home, sandbox.work, logs, timeout_s, wall)

    async def stop(self, sandbox: Sandbox) -> None:
        """Delete the session's directory, or log where it was kept."""
        if self.keep:
            log.info("session %s kept in %s", sandbox.session_id, sandbox.root)
            return
        # A large workspace (node_modules, a build) takes a while: not on the event loop.
        await asyncio.to_thread(shutil.rmtree, sandbox.root, ignore_errors=True)

    async def fill(self) -> None:
        """Nothing to have ready: a directory is made when its session starts."""

    async def close(self) -> None:
        """Release what the runtime holds between sessions (nothing, here)."""


class SetupError(RollstreamError):
    """A setup command failed or did not finish within the task's init timeout."""


async def run_setup(
    runtime: Runtime,
    sandbox: Sandbox,
    commands: Sequence[str],
    env: Mapping[str, str],
    deadline: float,
) -> None:
    """Run each setup command with bash in the workspace, all before ``deadline`` (loop time).

    Each command's output goes to ``logs/setup-<i>/``; the first failure raises a SetupError
    naming the command, its exit code and the end of its stderr.
    """
    for index, command in enumerate(commands):
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise SetupError(f"init timeout reached before setup command {index + 1}: {command}")
        launch = HarnessLaunch([*_SETUP_SHELL, command], dict(env))
        result = await runtime.execute(sandbox, launch, remaining, sandbox.logs / f"setup-{index}")
        if result.timed_out:
            raise SetupError(
                f"setup command {index + 1} did not finish within the init timeout: {command}"
            )
        if result.exit_code != 0:
            tail = result.stderr_tail.strip()[-_ERROR_TAIL:]
            raise SetupError(
                f"setup command {index + 1} exited with {result.exit_code}: {command}\n{tail}"
            )
