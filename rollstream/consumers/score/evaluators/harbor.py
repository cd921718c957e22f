"""``harbor``: a Harbor task's tests run against the session's work, as Harbor's verifier runs them.

As ``command``: a fresh container of the task's image (no network), the task's setup (which
puts the session's workspace where the image works, ``schemas/harbor.py``), the session's diff
applied. Then the task's ``tests/`` are written to ``/tests``, ``/logs/verifier`` is made empty,
and ``bash /tests/test.sh`` runs in the working directory; the tests write the reward to
``/logs/verifier/reward.txt`` (a number) or ``reward.json`` (``{"reward": number}``, or one
number under any name). That file is the reward; the exit code is in the details.

No reward, an error instead, when the tests write none (or write something that is no number),
on a timeout, and outside a container: the tests' paths (``/tests``, ``/logs``, the image's
working directory) are the container's, never the scorer's host.

Options: ``tests`` (a JSON object of path to text, as ``to_task`` writes it), ``env`` (a JSON
object: the verifier's environment), ``timeout``.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from pathlib import Path

from rollstream.consumers.score.evaluators.base import (
    EvalContext,
    EvalResult,
    EvaluatorError,
    required,
)
from rollstream.consumers.score.evaluators.command import check_timeout, in_workspace, run_script
from rollstream.sandbox.docker import DockerRuntime
from rollstream.sandbox.runtime import Runtime, Sandbox
from rollstream.schemas.tasks import Task
from rollstream.schemas.trajectories import Trajectory

#: Where the verifier's files are copied out of the container to be read.
_OUT = "verifier"


def _json_object(config: Mapping[str, str], key: str, default: str) -> dict[str, str]:
    try:
        value = json.loads(config.get(key, default))
    except json.JSONDecodeError as exc:
        raise EvaluatorError(f"{key} must be a JSON object: {exc}") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise EvaluatorError(f"{key} must be a JSON object of strings")
    return value


def read_reward(verifier: Path) -> float:
    """The reward the tests wrote in ``verifier`` (reward.txt, else reward.json)."""
    text_file, json_file = verifier / "reward.txt", verifier / "reward.json"
    if text_file.is_file():
        text = text_file.read_text().strip()
        try:
            reward = float(text)
        except ValueError:
            raise EvaluatorError(f"reward.txt holds no number: {text[:100]!r}") from None
    elif json_file.is_file():
        try:
            values = json.loads(json_file.read_text())
        except json.JSONDecodeError as exc:
            raise EvaluatorError(f"reward.json is not JSON: {exc}") from None
        if not isinstance(values, dict) or not values:
            raise EvaluatorError("reward.json must be an object of numbers")
        chosen = values.get("reward", next(iter(values.values())) if len(values) == 1 else None)
        if isinstance(chosen, bool) or not isinstance(chosen, int | float):
            raise EvaluatorError(f"reward.json names no reward: {sorted(values)}")
        reward = float(chosen)
    else:
        raise EvaluatorError("the tests wrote no reward (/logs/verifier/reward.txt or .json)")
    if not math.isfinite(reward):
        raise EvaluatorError(f"the reward is not finite: {reward}")
    return reward


def verifier_script(tests: Path, out: Path) -> str:
    """The verifier: the tests into /tests, an empty /logs/verifier, test.sh, its files out."""
    return (
        "rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier\n"
        f"cp -a {shlex.quote(str(tests))}/. /tests/\n"
        "bash /tests/test.sh\n"
        "code=$?\n"
        f"cp -a /logs/verifier/. {shlex.quote(str(out))}/\n"
        "exit $code\n"
    )


async def harbor(
    trajectory: Trajectory, config: Mapping[str, str], context: EvalContext
) -> EvalResult:
    """Run the task's tests in its container over the session's work; the reward they wrote."""
    tests = _json_object(config, "tests", required(config, "tests"))
    env = _json_object(config, "env", "{}")
    if "test.sh" not in tests:
        raise EvaluatorError("tests holds no test.sh")
    if not isinstance(context.runtime, DockerRuntime):
        raise EvaluatorError(
            "Harbor tasks are judged in their container: give the scorer the docker runtime "
            "(ROLLSTREAM_SCORE_RUNTIME=docker)"
        )
    details: dict[str, str] = {}

    async def verify(runtime: Runtime, sandbox: Sandbox, task: Task) -> EvalResult:
        folder, out = sandbox.logs / "tests", sandbox.logs / _OUT
        out.mkdir(parents=True, exist_ok=True)
        for name, text in tests.items():
            path = (folder / name).resolve()
            if not path.is_relative_to(folder.resolve()):
                raise EvaluatorError(f"a test file's path leaves tests/: {name}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        timeout = check_timeout(config, context)
        script = verifier_script(folder, out)
        verifying = task.model_copy(update={"env": task.env | env})
        result = await run_script(runtime, sandbox, verifying, script, timeout, details)
        if result.timed_out:
            return EvalResult(None, details, f"timeout: the tests ran longer than {timeout:g}s")
        try:
            return EvalResult(read_reward(out), details)
        except EvaluatorError as exc:  # the exit code and output say why
            return EvalResult(None, details, str(exc))

    return await in_workspace(trajectory, config, context, details, verify)
