"""The evaluators by name, and ``evaluate``: one trajectory, one result, never an exception.

Whatever goes wrong inside an evaluator (a bad config, a bug, a hang) becomes a result without
a reward and with the error: the scorer still emits a Scored record for the trajectory, so a
trainer sees it was scored and why there is no reward.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from rollstream.consumers.score.evaluators.base import (
    EvalContext,
    EvalResult,
    Evaluator,
    EvaluatorError,
)
from rollstream.consumers.score.evaluators.command import command
from rollstream.consumers.score.evaluators.exact_match import exact_match
from rollstream.consumers.score.evaluators.harbor import harbor
from rollstream.consumers.score.evaluators.python import python
from rollstream.consumers.score.evaluators.regex import regex
from rollstream.consumers.score.evaluators.session_completed import session_completed
from rollstream.consumers.score.evaluators.swe import swe
from rollstream.sandbox.runtime import Runtime
from rollstream.schemas.tasks import EvaluatorSpec
from rollstream.schemas.trajectories import Trajectory

log = logging.getLogger(__name__)

EVALUATORS: dict[str, Evaluator] = {
    "command": command,
    "exact_match": exact_match,
    "harbor": harbor,
    "regex": regex,
    "python": python,
    "session_completed": session_completed,
    "swe": swe,
}
UNKNOWN = "unknown evaluator"


def spec_for(trajectory: Trajectory, default: str) -> EvaluatorSpec:
    """The task's evaluator, or ``default`` (no config) when there is no task or it names none."""
    task = trajectory.task
    if task is not None and task.evaluator is not None:
        return task.evaluator
    return EvaluatorSpec(kind=default)


async def evaluate(
    trajectory: Trajectory,
    spec: EvaluatorSpec,
    *,
    timeout_s: float,
    work_root: Path | None = None,
    keep_workdirs: bool = False,
    runtime: Runtime | None = None,
) -> EvalResult:
    """Run ``spec``'s evaluator on ``trajectory`` within ``timeout_s``; errors become results."""
    evaluator = EVALUATORS.get(spec.kind)
    if evaluator is None:
        return EvalResult(None, {"kind": spec.kind}, UNKNOWN)
    loop = asyncio.get_running_loop()
    context = EvalContext(loop.time() + timeout_s, timeout_s, work_root, keep_workdirs, runtime)
    try:
        async with asyncio.timeout_at(context.deadline):
            return await evaluator(trajectory, spec.config, context)
    except TimeoutError:
        return EvalResult(None, {}, f"timeout: the evaluation took longer than {timeout_s:g}s")
    except EvaluatorError as exc:
        return EvalResult(None, {}, str(exc))
    except Exception as exc:  # an evaluator's bug must not lose the trajectory's record
        log.exception("evaluator %s failed on %s", spec.kind, trajectory.trajectory_id)
        return EvalResult(None, {}, f"{type(exc).__name__}: {exc}")
