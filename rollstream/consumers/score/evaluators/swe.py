"""``swe``: an SWE-style task's tests run against the session's work (SWE-bench's grading).

As ``command``: a fresh sandbox of the scorer's runtime (a container of the task's image, no
network, with the docker runtime), the task's workspace and setup, the session's diff applied.
Then the task's test patch is applied over the tests as the baseline has them (whatever the
session did to those files), and the tests are run by pytest with ``-rA``, whose summary gives
each test's outcome.

Reward 1.0 when every ``fail_to_pass`` test passes and every ``pass_to_pass`` test still passes,
else 0.0; the details hold the counts and the outcome of each test that was asked about and did
not pass (and of every ``fail_to_pass`` test). No reward, an error instead, when the test patch
does not apply, when the test command cannot run at all (exit 126 or 127: not in the image), or
on a timeout.

Options: ``test_patch``, ``fail_to_pass`` and ``pass_to_pass`` (JSON lists of pytest node ids),
as ``rollstream.schemas.swe.to_task`` writes them; ``test_command`` (default ``python3 -m pytest
-rA -p no:cacheprovider``; the node ids are appended); ``timeout``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from rollstream.consumers.score.evaluators.base import (
    EvalContext,
    EvalResult,
    EvaluatorError,
    required,
)
from rollstream.consumers.score.evaluators.command import (
    apply_diff,
    check_timeout,
    in_workspace,
    run_script,
)
from rollstream.consumers.score.evaluators.pytest_summary import outcomes, passed
from rollstream.sandbox.runtime import Runtime, Sandbox
from rollstream.schemas.tasks import Task
from rollstream.schemas.trajectories import Trajectory

DEFAULT_TEST_COMMAND = "python3 -m pytest -rA -p no:cacheprovider"
#: Exit codes of a shell that could not run the command at all: the image lacks it.
_NOT_RUNNABLE = (126, 127)
#: More of the test run's output than this is not read (pytest's summary is at its end).
_OUTPUT_LIMIT = 16 << 20
_HEADERS = ("--- a/", "+++ b/", "rename from ", "rename to ")


def _test_ids(config: Mapping[str, str], key: str) -> list[str]:
    text = config.get(key, "[]")
    try:
        ids = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvaluatorError(f"{key} must be a JSON list of test ids: {exc}") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        raise EvaluatorError(f"{key} must be a JSON list of test ids")
    return ids


def patched_paths(patch: str) -> list[str]:
    """The files a git patch touches (old and new names), each once, in order.

    Read from each file's header (``--- a/``, ``+++ b/``, ``rename from``/``to``), which keeps
    a path with spaces whole; never from a hunk, where a removed line may look like a header.
    """
    paths: dict[str, None] = {}
    in_header = False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            in_header = True
        elif line.startswith("@@"):
            in_header = False
        elif in_header and line.startswith(_HEADERS):
            prefix = next(h for h in _HEADERS if line.startswith(h))
            paths[line.removeprefix(prefix).split("\t")[0]] = None
    return list(paths)


def _read_output(sandbox: Sandbox) -> str:
    path = sandbox.logs / "command" / "stdout"
    with path.open("rb") as output:
        size = path.stat().st_size
        output.seek(max(size - _OUTPUT_LIMIT, 0))
        return output.read().decode("utf-8", "replace")


async def swe(
    trajectory: Trajectory, config: Mapping[str, str], context: EvalContext
) -> EvalResult:
    """Apply the test patch over the session's work, run the tests: all of them passing is 1.0."""
    test_patch = required(config, "test_patch")
    fail_to_pass = _test_ids(config, "fail_to_pass")
    pass_to_pass = _test_ids(config, "pass_to_pass")
    if not fail_to_pass:
        raise EvaluatorError("fail_to_pass names no test: nothing would tell a fix from none")
    command = config.get("test_command", DEFAULT_TEST_COMMAND)
    details: dict[str, str] = {}

    async def run_tests(runtime: Runtime, sandbox: Sandbox, task: Task) -> EvalResult:
        patch_file = sandbox.logs / "test.patch"
        patch_file.write_text(test_patch)
        restore = patched_paths(test_patch)
        complaint = await apply_diff(
            runtime, sandbox, patch_file, check_timeout(config, context), restore=restore
        )
        if complaint is not None:
            return EvalResult(None, details, f"test patch does not apply: {complaint}")
        timeout = check_timeout(config, context)
        script = f"{command} {shlex.join([*fail_to_pass, *pass_to_pass])}"
        result = await run_script(runtime, sandbox, task, script, timeout, details)
        if result.timed_out:
            return EvalResult(None, details, f"timeout: the tests ran longer than {timeout:g}s")
        if result.exit_code in _NOT_RUNNABLE:
            return EvalResult(None, details, f"the test command could not run: {command}")
        results = outcomes(_read_output(sandbox), [*fail_to_pass, *pass_to_pass])
        fixed = passed(results, fail_to_pass)
        kept = passed(results, pass_to_pass)
        details.update(
            {
                "fail_to_pass": f"{len(fixed)}/{len(fail_to_pass)}",
                "pass_to_pass": f"{len(kept)}/{len(pass_to_pass)}",
                "tests": json.dumps(
                    {t: results[t] for t in fail_to_pass}
                    | {t: results[t] for t in pass_to_pass if t not in kept},
                    sort_keys=True,
                ),
            }
        )
        solved = len(fixed) == len(fail_to_pass) and len(kept) == len(pass_to_pass)
        return EvalResult(1.0 if solved else 0.0, details)

    return await in_workspace(trajectory, config, context, details, run_tests)
