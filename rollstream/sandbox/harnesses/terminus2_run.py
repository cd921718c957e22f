"""Run Harbor's Terminus-2 agent headless on one instruction: the terminus-2 preset's driver.

Harbor (PyPI ``harbor``) runs agents in an environment (Docker, Daytona, Modal, ...) and ships
none that runs on the host: the node has already made the session's sandbox (its own HOME,
workspace and network wall), so this driver's ``LocalEnvironment`` runs every ``exec`` as
``bash -c COMMAND`` in the current directory, as this process's user. Terminus-2 drives a tmux
session through it (``new-session``, ``send-keys``, ``capture-pane``) under a fixed name, so
the tmux server is private to the run (its own ``TMUX_TMPDIR``) and is killed at the end, also
on SIGTERM.

It imports Harbor only (rollstream is not in that venv) and reads where and as whom to call
from ``ROLLSTREAM_BASE_URL``, ``ROLLSTREAM_SESSION`` (the API key, kept out of the agent's
shell and of Harbor's trajectory file) and ``ROLLSTREAM_MODEL``. Terminus-2 calls litellm's
``openai/MODEL``: Chat Completions, not streamed, no tools; the model answers with a JSON object
(analysis, plan, commands, task_complete). The run ends when two answers in a row set
``task_complete`` (the agent asks to confirm), or after ``MAX_TURNS`` answers. The last
answer's analysis is printed. Exit 0 when the completion was confirmed, 1 otherwise, 2 without
tmux (Harbor would install it with apt-get, or build it from GitHub).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MAX_TURNS = 50


def local_environment_class() -> Any:
    """The environment running on this machine (a class made once Harbor is importable)."""
    from harbor.environments.base import (  # type: ignore[import-not-found]
        BaseEnvironment,
        ExecResult,
    )

    class LocalEnvironment(BaseEnvironment):  # type: ignore[misc]
        """Commands run here, in ``workdir``; files are copied on this machine."""

        def __init__(self, workdir: Path, exec_env: dict[str, str], **kwargs: Any) -> None:
            self._workdir = workdir
            self._exec_env = exec_env
            super().__init__(**kwargs)

        @staticmethod
        def type() -> str:
            return "local"

        def _validate_definition(self) -> None:
            """Nothing to build."""

        async def start(self, force_build: bool) -> None:
            """Nothing to start: the node made the sandbox."""

        async def stop(self, delete: bool) -> None:
            """Nothing to stop: the tmux server goes when the driver ends."""

        async def exec(
            self,
            command: str,
            cwd: str | None = None,
            env: dict[str, str] | None = None,
            timeout_sec: float | None = None,
            user: str | None = None,
        ) -> Any:
            proc = await asyncio.create_subprocess_exec(
                "/bin/bash",
                "-c",
                command,
                cwd=cwd or self._workdir,
                env={**self._exec_env, **(self._merge_env(env) or {})},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout_sec)
                code = proc.returncode
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = await proc.communicate()
                code = 124
            return ExecResult(
                stdout=out.decode(errors="replace"),
                stderr=err.decode(errors="replace"),
                return_code=code,
            )

        def _here(self, path: str | Path) -> Path:
            return Path(self._workdir, path)  # an absolute path stays as it is

        async def upload_file(self, source_path: str | Path, target_path: str) -> None:
            target = self._here(target_path)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source_path, target)

        async def upload_dir(self, source_dir: str | Path, target_dir: str) -> None:
            shutil.copytree(source_dir, self._here(target_dir), dirs_exist_ok=True)

        async def download_file(self, source_path: str, target_path: str | Path) -> None:
            Path(target_path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self._here(source_path), target_path)

        async def download_dir(self, source_dir: str, target_dir: str | Path) -> None:
            shutil.copytree(self._here(source_dir), target_dir, dirs_exist_ok=True)

    return LocalEnvironment


def agent_steps(trajectory_file: Path) -> list[dict[str, Any]]:
    """The agent's steps in Harbor's trajectory file (none if it was not written)."""
    if not trajectory_file.exists():
        return []
    steps = json.loads(trajectory_file.read_text()).get("steps", [])
    return [step for step in steps if step.get("source") == "agent"]


def confirmed(steps: list[dict[str, Any]]) -> bool:
    """Whether the last two answers both marked the task complete (the confirmation)."""
    marks = [
        any(c.get("function_name") == "mark_task_complete" for c in s.get("tool_calls") or [])
        for s in steps
    ]
    return len(marks) >= 2 and marks[-1] and marks[-2]


async def run(instruction: str, workdir: Path, scratch: Path, exec_env: dict[str, str]) -> int:
    """One Terminus-2 run in ``workdir``; Harbor's own files go under ``scratch``."""
    from harbor.agents.terminus_2 import Terminus2  # type: ignore[import-not-found]
    from harbor.models.agent.context import AgentContext  # type: ignore[import-not-found]
    from harbor.models.task.config import EnvironmentConfig  # type: ignore[import-not-found]
    from harbor.models.trial.paths import TrialPaths  # type: ignore[import-not-found]

    paths = TrialPaths(trial_dir=scratch / "trial")
    paths.mkdir()
    environment = local_environment_class()(
        workdir=workdir,
        exec_env=exec_env,
        environment_dir=workdir,
        environment_name="local",
        session_id="terminus-2-local",
        trial_paths=paths,
        task_env_config=EnvironmentConfig(),
    )
    agent = Terminus2(
        logs_dir=paths.agent_dir,
        model_name=f"openai/{os.environ['ROLLSTREAM_MODEL']}",  # litellm's OpenAI route
        api_base=f"{os.environ['ROLLSTREAM_BASE_URL']}/v1",
        parser_name="json",
        max_turns=MAX_TURNS,
        suppress_max_turns_warning=True,
        record_terminal_session=False,  # else it installs asciinema (apt-get, pip) as root
    )
    await environment.start(force_build=False)
    await agent.setup(environment)
    await agent.run(instruction, environment, AgentContext())
    steps = agent_steps(paths.agent_dir / "trajectory.json")
    if steps:
        print(steps[-1].get("message", ""))
    return 0 if confirmed(steps) else 1


def main(argv: list[str]) -> int:
    """Run Terminus-2 on ``argv[1]`` in the current directory."""
    if shutil.which("tmux") is None:
        print("terminus2_run: tmux is not on PATH", file=sys.stderr)
        return 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)  # Harbor sets its loggers to DEBUG
    logging.getLogger().addHandler(handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    scratch = Path(tempfile.mkdtemp(prefix="terminus2-"))
    # tmux's socket is TMUX_TMPDIR/tmux-UID/default, and a socket's path has at most 107 bytes:
    # under a deep TMPDIR (the session's HOME), the directory goes to /tmp (private, 0700).
    short = len(str(scratch)) + len("/tmux/tmux-4294967295/default") < 100
    tmux_dir = scratch / "tmux" if short else Path(tempfile.mkdtemp(prefix="t2-", dir="/tmp"))
    tmux_dir.mkdir(mode=0o700, exist_ok=True)
    # The agent's shell: this environment without the key, outside any tmux of the caller's.
    hidden = ("TMUX", "TMUX_PANE", "ROLLSTREAM_SESSION", "OPENAI_API_KEY")
    exec_env = {k: v for k, v in os.environ.items() if k not in hidden}
    exec_env["TMUX_TMPDIR"] = str(tmux_dir)
    # litellm's key for openai/ models, read from here (not written into the trajectory file).
    os.environ["OPENAI_API_KEY"] = os.environ["ROLLSTREAM_SESSION"]
    try:
        return asyncio.run(run(argv[1], Path.cwd(), scratch, exec_env))
    finally:
        subprocess.run(["tmux", "kill-server"], env=exec_env, capture_output=True, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(tmux_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
