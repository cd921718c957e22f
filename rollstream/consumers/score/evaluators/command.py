"""``command``: the task's check (e.g. its tests) run against the session's work.

The steps repeat the node's session init (``producers/node``): a fresh scratch directory (the
scorer's runtime: local processes, or a fresh container per evaluation with no network and a CPU
and memory bound), the task's workspace materialized, its setup commands run within the task's
init timeout, a git baseline; then, in the runtime too, the session's diff applied with
``git apply`` and ``config["command"]`` run by bash in the workspace (locally in a process group
of its own), killed on timeout. The baseline matters beyond symmetry: ``git apply`` in a
directory inside another repository would resolve paths against that repository.

Reward 1.0 when the command exits 0, else 0.0. No reward, an error instead, when the scorer
cannot judge the work: a diff artifact the node truncated, a diff that does not apply, a
workspace or setup that fails, a timeout. A diff that does not apply means the workspace
rebuilt here is not the one the session started from (a directory workspace changed since, a
setup that is not deterministic): not the policy's doing, so it must not train as a 0.

Options: ``command`` (required), ``timeout`` (seconds; default the scorer's evaluator timeout,
and never past what is left of it), ``artifact`` (the diff's name; default the node's
``workspace.diff``, else ``diff``).
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from rollstream.consumers.score.evaluators.base import (
    EvalContext,
    EvalResult,
    EvaluatorError,
    required,
    seconds,
)
from rollstream.errors import RollstreamError
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.harnesses.runner import HarnessResult
from rollstream.sandbox.netns import Wall
from rollstream.sandbox.runtime import (
    SHELL,
    LocalRuntime,
    Runtime,
    Sandbox,
    SetupError,
    run_setup,
)
from rollstream.sandbox.workspace import (
    DIFF_ARTIFACT,
    GIT_ISOLATION,
    WorkspaceError,
    baseline,
    materialize,
)
from rollstream.schemas.sessions import Artifact
from rollstream.schemas.tasks import Task
from rollstream.schemas.trajectories import Trajectory

_SHELL = (*SHELL, "-c")
#: Output of the command and its children as one stream, in the order it was written.
_MERGE_STDERR = "exec 2>&1\n"
_OUTPUT_TAIL = 2000
_ERROR_TAIL = 1000
#: run_harness gives a timed-out process group 5 s between SIGTERM and SIGKILL.
_KILL_GRACE_S = 6.0
_DIFF_NAMES = (DIFF_ARTIFACT, "diff")
#: Where the policy's work runs in a scorer: its own network with loopback alone (the runtime's
#: ``walls`` decide whether it is built).
POLICY_WALL = Wall()
#: What judges the rebuilt work (``in_workspace``): its runtime, sandbox and task in, a result out.
Check = Callable[[Runtime, Sandbox, Task], Awaitable[EvalResult]]


def find_diff(trajectory: Trajectory, config: Mapping[str, str]) -> Artifact | None:
    """The session's diff artifact, by the configured name or the usual ones."""
    names = (config["artifact"],) if "artifact" in config else _DIFF_NAMES
    for name in names:
        artifact = trajectory.artifact(name)
        if artifact is not None:
            return artifact
    return None


async def apply_diff(
    runtime: Runtime,
    sandbox: Sandbox,
    patch: Path,
    timeout: float,
    *,
    restore: Sequence[str] = (),
) -> str | None:
    """``git apply`` the patch file in the sandbox's workspace; None on success, else git's words.

    ``restore`` are paths put back as the baseline has them first (deleted where it has none):
    a test patch must apply to the tests as they were, whatever the session did to them. It runs
    where the command will (the evaluation's container with the docker runtime).
    """
    script = "".join(
        f"git checkout HEAD -- {shlex.quote(p)} 2>/dev/null || rm -f -- {shlex.quote(p)}\n"
        for p in restore
    )
    script += shlex.join(["git", "apply", "--whitespace=nowarn", str(patch)])
    launch = HarnessLaunch(
        [*_SHELL, _MERGE_STDERR + f"cd {shlex.quote(str(sandbox.work))}\n" + script],
        dict(GIT_ISOLATION),
    )
    logs = sandbox.logs / f"apply-{patch.stem}"
    # The patch is the policy's: git apply runs behind the wall too.
    result = await runtime.execute(sandbox, launch, timeout, logs, POLICY_WALL)
    if result.exit_code == 0:
        return None
    if result.timed_out:
        return f"git apply ran longer than {timeout:g}s"
    return result.stdout_tail.strip()[-_ERROR_TAIL:] or f"exit {result.exit_code}"


async def _prepare(
    runtime: Runtime, sandbox: Sandbox, task: Task, context: EvalContext
) -> str | None:
    """Workspace, setup, baseline; None when ready, else the error."""
    loop = asyncio.get_running_loop()
    deadline = min(loop.time() + task.init_timeout_s, context.deadline)
    step = "materializing the workspace"
    try:
        async with asyncio.timeout_at(deadline):
            await materialize(task.workspace, sandbox.work)
        step = "running the setup commands"
        await run_setup(runtime, sandbox, task.setup, task.env, deadline)
        step = "committing the workspace baseline"
        async with asyncio.timeout_at(deadline):
            await baseline(sandbox.work)
    except TimeoutError:
        return f"timeout while {step} (init timeout {task.init_timeout_s:g}s)"
    except (WorkspaceError, SetupError) as exc:
        return f"workspace: {step} failed: {exc}"
    return None


async def run_script(
    runtime: Runtime,
    sandbox: Sandbox,
    task: Task,
    script: str,
    timeout: float,
    details: dict[str, str],
) -> HarnessResult:
    """``script`` by bash in the workspace with the task's env; its exit and output in ``details``.

    ``details`` gets the exit code, the output's tail and the times; the whole output is in
    ``sandbox.logs / "command" / "stdout"``.
    """
    launch = HarnessLaunch([*_SHELL, _MERGE_STDERR + script], dict(task.env))
    # The command runs the policy's work (its tests call its code): behind the wall.
    result = await runtime.execute(sandbox, launch, timeout, sandbox.logs / "command", POLICY_WALL)
    details |= {
        "exit_code": "" if result.exit_code is None else str(result.exit_code),
        "output": result.stdout_tail[-_OUTPUT_TAIL:],
        "duration_s": f"{result.duration_s:.3f}",
        "timeout_s": f"{timeout:g}",
    }
    return result


def _sandbox_name(trajectory: Trajectory) -> str:
    # The name becomes part of a directory name.
    return "score-" + re.sub(r"[^A-Za-z0-9_.-]", "_", trajectory.session_id)[:64]


def check_timeout(config: Mapping[str, str], context: EvalContext) -> float:
    """The check's own timeout (``timeout``, default the evaluator's), inside what is left.

    The kill grace stays inside the evaluation's bound: our own timeout, with the command's
    output, rather than the outer one.
    """
    timeout = seconds(config, "timeout", context.timeout_s)
    return max(min(timeout, context.remaining() - _KILL_GRACE_S), 0.1)


async def in_workspace(
    trajectory: Trajectory,
    config: Mapping[str, str],
    context: EvalContext,
    details: dict[str, str],
    check: Check,
) -> EvalResult:
    """The session's work rebuilt in a fresh sandbox, judged by ``check``; the sandbox removed.

    The sandbox is the scorer's runtime's (a container of the task's image with the docker
    runtime); the workspace, setup and baseline are the node's, then the session's diff is
    applied. No reward when that cannot be done (a truncated diff, no runtime, a workspace or
    diff that fails): not the policy's doing.
    """
    task = trajectory.task
    if task is None:
        raise EvaluatorError("the trajectory has no task, so no workspace to run the command in")
    patch = find_diff(trajectory, config)
    details["diff"] = "none" if patch is None else patch.name
    if patch is not None and patch.truncated:
        error = (
            f"diff artifact {patch.name} is truncated ({len(patch.content)} of "
            f"{patch.original_size} bytes): the session's work is not all there"
        )
        return EvalResult(None, details, error)
    runtime = context.runtime or LocalRuntime(context.work_root, context.keep_workdirs)
    try:
        sandbox = await runtime.start(_sandbox_name(trajectory), task.image)
    except (RollstreamError, OSError) as exc:
        # No container (a missing image, an engine away): not the policy's doing, no reward.
        return EvalResult(None, details, f"runtime: {exc}")
    try:
        failed = await _prepare(runtime, sandbox, task, context)
        if failed is not None:
            return EvalResult(None, details, failed)
        if patch is not None and patch.content.strip():
            patch_file = sandbox.logs / "session.diff"
            patch_file.write_bytes(patch.content)
            apply_timeout = max(context.remaining() - _KILL_GRACE_S, 0.1)
            complaint = await apply_diff(runtime, sandbox, patch_file, apply_timeout)
            if complaint is not None:
                return EvalResult(None, details, f"diff does not apply: {complaint}")
        return await check(runtime, sandbox, task)
    finally:
        await runtime.stop(sandbox)


async def command(
    trajectory: Trajectory, config: Mapping[str, str], context: EvalContext
) -> EvalResult:
    """Rebuild the workspace, apply the session's diff, run the command: exit 0 is 1.0."""
    script = required(config, "command")

    async def run(runtime: Runtime, sandbox: Sandbox, task: Task) -> EvalResult:
        timeout = check_timeout(config, context)
        result = await run_script(runtime, sandbox, task, script, timeout, details)
        if result.timed_out:
            return EvalResult(None, details, f"timeout: the command ran longer than {timeout:g}s")
        return EvalResult(1.0 if result.exit_code == 0 else 0.0, details)

    details: dict[str, str] = {}
    return await in_workspace(trajectory, config, context, details, run)
