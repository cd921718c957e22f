"""What every evaluator gets and returns.

An evaluator is an async function ``(trajectory, config, context) -> EvalResult``: ``config``
is the task's ``EvaluatorSpec.config`` (string values), ``context`` says how long it may take
and where it may put files. It raises ``EvaluatorError`` for a configuration it cannot use;
the registry turns that, any other exception and a timeout into a result without a reward.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rollstream.errors import RollstreamError
from rollstream.sandbox.runtime import Runtime
from rollstream.schemas.trajectories import Trajectory

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


class EvaluatorError(RollstreamError):
    """An evaluator's configuration (or the trajectory) does not allow a reward to be computed."""


@dataclass(frozen=True)
class EvalResult:
    """A reward (None when it could not be computed), string details, and the error if any."""

    reward: float | None
    details: dict[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class EvalContext:
    """The limits and the scratch space of one evaluation."""

    deadline: float  # event-loop time by which the evaluation is cancelled
    timeout_s: float  # the scorer's evaluator timeout (a command's default timeout)
    work_root: Path | None = None
    keep_workdirs: bool = False
    #: Where commands run: the scorer's runtime (a fresh container per evaluation with the docker
    #: runtime); None: a local runtime of this evaluation's own.
    runtime: Runtime | None = None

    def remaining(self) -> float:
        """Seconds left before the deadline (negative once it passed)."""
        return self.deadline - asyncio.get_running_loop().time()


Evaluator = Callable[[Trajectory, Mapping[str, str], EvalContext], Awaitable[EvalResult]]


def required(config: Mapping[str, str], key: str) -> str:
    """``config[key]``, or an EvaluatorError naming the missing key."""
    value = config.get(key)
    if value is None:
        raise EvaluatorError(f"the evaluator config has no {key!r}")
    return value


def flag(config: Mapping[str, str], key: str) -> bool:
    """A yes/no option of the config (absent: no); anything else is an EvaluatorError."""
    value = config.get(key, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EvaluatorError(f"config {key!r}: {value!r} is not a yes/no value")


def seconds(config: Mapping[str, str], key: str, default: float) -> float:
    """A positive duration option of the config, or ``default`` when absent."""
    value = config.get(key)
    if value is None or not value.strip():
        return default
    try:
        parsed = float(value)
    except ValueError:
        raise EvaluatorError(f"config {key!r}: {value!r} is not a number of seconds") from None
    if not parsed > 0:
        raise EvaluatorError(f"config {key!r}: {value!r} must be positive")
    return parsed
