"""``exact_match``: the final answer, stripped, equals ``config["expected"]``.

Options: ``expected`` (required, stripped too, so a trailing newline in a task file does not
matter), ``ignore_case`` (yes/no, default no).
"""

from __future__ import annotations

from collections.abc import Mapping

from rollstream.consumers.score.evaluators.base import EvalContext, EvalResult, flag, required
from rollstream.schemas.trajectories import Trajectory


async def exact_match(
    trajectory: Trajectory, config: Mapping[str, str], context: EvalContext
) -> EvalResult:
    """1.0 if the stripped final text equals the expected answer, else 0.0."""
    expected = required(config, "expected").strip()
    ignore_case = flag(config, "ignore_case")
    got = trajectory.final_text.strip()
    if ignore_case:
        expected, got = expected.casefold(), got.casefold()
    return EvalResult(1.0 if got == expected else 0.0, {"ignore_case": str(ignore_case).lower()})
