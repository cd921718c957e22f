"""``python``: a function of yours, ``config["function"] = "module:function"``.

It is called in a worker thread (it may block) as ``function(trajectory, task)`` (``task`` may
be None) and returns a number, or a dict with ``"reward"`` (a number or None) and any other
keys, which become details (as strings). An import error, an exception or another return value
is an error. A function that never returns holds its thread after the timeout: threads cannot
be killed, only abandoned.
"""

from __future__ import annotations

import asyncio
import importlib
import math
from collections.abc import Callable, Mapping
from typing import Any

from rollstream.consumers.score.evaluators.base import (
    EvalContext,
    EvalResult,
    EvaluatorError,
    required,
)
from rollstream.schemas.trajectories import Trajectory


def load_function(path: str) -> Callable[..., Any]:
    """The callable named ``module:function`` (dots after the colon reach attributes)."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise EvaluatorError(f"function {path!r} is not of the form module:function")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises while importing
        raise EvaluatorError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise EvaluatorError(f"{module_name} has no {attribute}") from None
    if not callable(target):
        raise EvaluatorError(f"{path} is not callable")
    return target  # type: ignore[no-any-return]


def _reward(value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float):
        raise EvaluatorError(f"the reward {value!r} is not a number")
    reward = float(value)
    if not math.isfinite(reward):
        raise EvaluatorError(f"the reward {reward} is not finite")
    return reward


def interpret(value: object) -> EvalResult:
    """A function's return value as a result."""
    if isinstance(value, dict):
        if "reward" not in value:
            raise EvaluatorError("the returned dict has no 'reward'")
        details = {str(k): str(v) for k, v in value.items() if k != "reward"}
        return EvalResult(_reward(value["reward"]), details)
    if value is None or isinstance(value, int | float):  # a bool counts as 0 or 1
        return EvalResult(_reward(value))
    raise EvaluatorError(
        f"the function returned {type(value).__name__}, not a number or a dict with 'reward'"
    )


def _call(path: str, trajectory: Trajectory) -> object:
    # The import too runs in the thread: a module may be slow to import.
    function = load_function(path)
    try:
        return function(trajectory, trajectory.task)
    except Exception as exc:
        raise EvaluatorError(f"{path} raised {type(exc).__name__}: {exc}") from exc


async def python(
    trajectory: Trajectory, config: Mapping[str, str], context: EvalContext
) -> EvalResult:
    """Call the configured function in a thread and take its reward and details."""
    path = required(config, "function")
    value = await asyncio.to_thread(_call, path, trajectory)
    return interpret(value)
