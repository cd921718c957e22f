"""``session_completed``: 1.0 if the harness session completed, else 0.0 (the default)."""

from __future__ import annotations

from collections.abc import Mapping

from rollstream.consumers.score.evaluators.base import EvalContext, EvalResult
from rollstream.schemas.sessions import SessionStatus
from rollstream.schemas.trajectories import Trajectory


async def session_completed(
    trajectory: Trajectory, config: Mapping[str, str], context: EvalContext
) -> EvalResult:
    """Whether the session ended with status completed."""
    status = trajectory.session_status
    reward = 1.0 if status is SessionStatus.COMPLETED else 0.0
    return EvalResult(reward, {"session_status": status.value})
