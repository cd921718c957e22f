"""The command evaluator on real workspaces, real git diffs and real processes."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path

import pytest

from rollstream.consumers.score.evaluators import EvalResult, evaluate
from rollstream.consumers.score.service import _command_runtime
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.sandbox.runtime import LocalRuntime
from rollstream.sandbox.workspace import DIFF_ARTIFACT, baseline, diff, materialize
from rollstream.schemas import (
    Artifact,
    EvaluatorSpec,
    Task,
    Trajectory,
    Workspace,
    WorkspaceKind,
)
from tests.network_probe import probe_command
from tests.schemas.samples import TASK, TRAJECTORY

BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
FILES = {
    "calc.py": BROKEN,
    "test_calc.py": (
        "import pathlib\n"
        "from calc import add\n"
        "assert pathlib.Path('setup.txt').read_text() == 'prepared\\n', 'setup did not run'\n"
        "assert add(2, 3) == 5, 'add is wrong'\n"
        "print('all tests passed')\n"
    ),
}
SETUP = ["echo prepared > setup.txt"]
TEST_COMMAND = f"{sys.executable} test_calc.py"


def _task(command: str = TEST_COMMAND, **config: str) -> Task:
    return TASK.model_copy(
        update={
            "workspace": Workspace(kind=WorkspaceKind.INLINE, files=FILES),
            "setup": SETUP,
            "env": {},
            "evaluator": EvaluatorSpec(kind="command", config={"command": command, **config}),
        }
    )


async def _session_diff(tmp_path: Path, task: Task, fixed_calc: str) -> Artifact:
    """The diff artifact a node produces when the harness rewrites calc.py."""
    sandbox = await LocalRuntime(tmp_path).start("session")
    work = sandbox.work
    await materialize(task.workspace, work)
    (work / "setup.txt").write_text("prepared\n")  # what the setup left
    base = await baseline(work)
    (work / "calc.py").write_text(fixed_calc)
    (work / "NOTES.md").write_text("fixed the sign\n")  # untracked files travel too
    return await diff(LocalRuntime(), sandbox, base, 1 << 20, 60)


def _trajectory(task: Task | None, artifacts: list[Artifact]) -> Trajectory:
    return TRAJECTORY.model_copy(update={"task": task, "artifacts": artifacts})


async def _score(
    trajectory: Trajectory, work_root: Path, timeout_s: float = 60, keep: bool = False
) -> EvalResult:
    task = trajectory.task
    # A trajectory without a task is scored as if the scorer's default were this command.
    spec = task.evaluator if task and task.evaluator else _task().evaluator
    assert spec is not None
    return await evaluate(
        trajectory, spec, timeout_s=timeout_s, work_root=work_root, keep_workdirs=keep
    )


async def test_a_diff_that_fixes_the_code_passes(tmp_path: Path) -> None:
    task = _task()
    patch = await _session_diff(tmp_path, task, FIXED)
    assert patch.name == DIFF_ARTIFACT and b"+    return a + b" in patch.content
    result = await _score(_trajectory(task, [patch]), tmp_path / "scratch")
    assert result.error is None, result
    assert result.reward == 1.0
    assert result.details["exit_code"] == "0"
    assert "all tests passed" in result.details["output"]
    assert float(result.details["duration_s"]) > 0
    assert list((tmp_path / "scratch").iterdir()) == []  # scratch removed


async def test_no_diff_runs_the_untouched_workspace_and_fails(tmp_path: Path) -> None:
    result = await _score(_trajectory(_task(), []), tmp_path / "scratch")
    assert result.error is None and result.reward == 0.0
    assert result.details["exit_code"] == "1" and result.details["diff"] == "none"
    assert "add is wrong" in result.details["output"]  # stderr is in the output


async def test_a_diff_that_does_not_fix_it_scores_zero(tmp_path: Path) -> None:
    task = _task()
    patch = await _session_diff(tmp_path, task, "def add(a, b):\n    return a * b\n")
    result = await _score(_trajectory(task, [patch]), tmp_path / "scratch")
    assert result.error is None and result.reward == 0.0


async def test_a_diff_named_diff_is_found_too(tmp_path: Path) -> None:
    task = _task()
    patch = await _session_diff(tmp_path, task, FIXED)
    renamed = patch.model_copy(update={"name": "diff"})
    result = await _score(_trajectory(task, [renamed]), tmp_path / "scratch")
    assert result.reward == 1.0 and result.details["diff"] == "diff"


async def test_a_diff_that_does_not_apply_has_no_reward(tmp_path: Path) -> None:
    task = _task()
    other = task.model_copy(
        update={"workspace": Workspace(kind=WorkspaceKind.INLINE, files={"calc.py": "x = 1\n"})}
    )
    patch = await _session_diff(tmp_path, other, FIXED)  # made against another calc.py
    result = await _score(_trajectory(task, [patch]), tmp_path / "scratch")
    assert result.reward is None
    assert result.error is not None and result.error.startswith("diff does not apply:")
    assert "calc.py" in result.error


async def test_a_truncated_diff_has_no_reward(tmp_path: Path) -> None:
    task = _task()
    patch = await _session_diff(tmp_path, task, FIXED)
    cut = patch.model_copy(update={"truncated": True, "original_size": len(patch.content) * 2})
    result = await _score(_trajectory(task, [cut]), tmp_path / "scratch")
    assert result.reward is None
    assert result.error is not None and "truncated" in result.error


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie is dead, only not yet reaped


async def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    script = f"sleep 60 & echo $! > {pid_file}; echo started; wait"
    task = _task(script, timeout="0.5")
    began = time.monotonic()
    result = await _score(_trajectory(task, []), tmp_path / "scratch")
    assert result.reward is None
    assert result.error == "timeout: the command ran longer than 0.5s"
    assert result.details["exit_code"] == "" and "started" in result.details["output"]
    assert time.monotonic() - began < 10
    pid = int(pid_file.read_text())
    for _ in range(50):  # the SIGKILLed child may take a moment to be reaped
        if not _alive(pid):
            break
        await asyncio.sleep(0.1)
    assert not _alive(pid)


async def test_the_command_timeout_stays_within_the_evaluator_timeout(tmp_path: Path) -> None:
    # No timeout in the config: the scorer's evaluator timeout bounds the command, and the
    # command's own timeout fires first (with its output), not the outer cancellation.
    task = _task("echo waiting; sleep 60")
    result = await _score(_trajectory(task, []), tmp_path / "scratch", timeout_s=7)
    assert result.reward is None
    assert result.error is not None and result.error.startswith("timeout: the command ran")
    assert "waiting" in result.details["output"]


async def test_a_failing_setup_has_no_reward(tmp_path: Path) -> None:
    task = _task().model_copy(update={"setup": ["echo nope >&2; exit 7"]})
    result = await _score(_trajectory(task, []), tmp_path / "scratch")
    assert result.reward is None and result.error is not None
    assert result.error.startswith("workspace: running the setup commands failed")
    assert "exited with 7" in result.error and "nope" in result.error


async def test_the_task_env_reaches_the_command_and_workdirs_can_be_kept(tmp_path: Path) -> None:
    task = _task('test "$ANSWER" = 42').model_copy(update={"env": {"ANSWER": "42"}})
    result = await _score(_trajectory(task, []), tmp_path / "scratch", keep=True)
    assert result.reward == 1.0
    [kept] = (tmp_path / "scratch").iterdir()
    assert (kept / "work" / "calc.py").read_text() == BROKEN


@pytest.mark.parametrize(
    ("task", "error"),
    [
        (None, "has no task"),
        (_task().model_copy(update={"evaluator": EvaluatorSpec(kind="command")}), "no 'command'"),
        (_task(timeout="soon"), "not a number of seconds"),
    ],
)
async def test_config_errors(tmp_path: Path, task: Task | None, error: str) -> None:
    result = await _score(_trajectory(task, []), tmp_path / "scratch")
    assert result.reward is None and result.error is not None and error in result.error


@pytest.mark.parametrize("walls", [True, False])
async def test_the_policys_code_runs_behind_the_wall_and_the_setup_does_not(
    tmp_path: Path, walls: bool
) -> None:
    with socket.socket() as broker:
        broker.bind(("127.0.0.1", 0))
        broker.listen(8)
        targets = {"broker": ("127.0.0.1", broker.getsockname()[1])}
        # The task's own setup (trusted) keeps the network; the check runs the policy's work.
        task = _task(probe_command(targets, out=None)).model_copy(
            update={"setup": [*SETUP, probe_command(targets, out="setup-probe.json")]}
        )
        trajectory = _trajectory(task, [await _session_diff(tmp_path, task, FIXED)])
        assert task.evaluator is not None
        result = await evaluate(
            trajectory,
            task.evaluator,
            timeout_s=60,
            work_root=tmp_path / "score",
            keep_workdirs=True,
            runtime=LocalRuntime(tmp_path / "score", keep=True, walls=walls),
        )
    assert result.error is None, result
    [work] = (tmp_path / "score").glob("*/work")
    assert json.loads((work / "setup-probe.json").read_text()) == {"broker": "open"}
    expected = "ConnectionRefusedError" if walls else "open"
    assert json.loads(result.details["output"]) == {"broker": expected}


def test_the_scorer_walls_its_commands_by_default() -> None:
    runtime = _command_runtime(ScoreSettings())
    assert isinstance(runtime, LocalRuntime) and runtime.walls
    assert not _command_runtime(ScoreSettings(isolation="none")).walls
