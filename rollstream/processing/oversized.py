"""Consumer outputs over the record budget: recorded without bulky optional parts, or refused.

A consumer's output must fit one Kafka record (``RECORD_BUDGET_BYTES``): one that does not
fails in the producer or aborts the transaction it is sent in, and the restarted consumer meets
the same input again, for ever. So every output is encoded and measured before its transaction
opens. What is over the budget is encoded again without parts that neither training nor
scoring reads (the Chat messages kept for export, then, once scored, the evaluator's details
and the session's artifacts), each left-out part named in the record itself; what is still
over raises ``RecordTooLargeError`` for the caller to dead-letter with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rollstream.errors import RecordTooLargeError
from rollstream.schemas import RECORD_BUDGET_BYTES, AvroSerializer, record_size
from rollstream.schemas.trajectories import Scored, Trajectory

#: Room a Scored record needs around its trajectory (reward, evaluator, details): the
#: reconstructor keeps trajectories this far under the budget, so the scorer can wrap any
#: trajectory it reads without leaving anything out (unless an evaluator's details are huge).
SCORED_HEADROOM_BYTES = 1024 * 1024
TRAJECTORY_BUDGET_BYTES = RECORD_BUDGET_BYTES - SCORED_HEADROOM_BYTES


@dataclass(frozen=True)
class Encoded:
    """An output's bytes, and the parts left out to make it fit ([]: recorded whole)."""

    value: bytes
    left_out: list[str] = field(default_factory=list)


def _note(what: str, size: int, budget: int, left_out: list[str]) -> str:
    return (
        f"oversized: {', '.join(left_out)} left out ({what} of {size} bytes, "
        f"over the {budget}-byte record budget)"
    )


def _noted(trajectory: Trajectory, note: str, **update: object) -> Trajectory:
    stats = trajectory.stats.model_copy(update={"notes": [*trajectory.stats.notes, note]})
    return trajectory.model_copy(update={**update, "stats": stats})


def encode_trajectory(
    serializer: AvroSerializer,
    key: bytes,
    trajectory: Trajectory,
    budget: int = TRAJECTORY_BUDGET_BYTES,
) -> Encoded:
    """The trajectory's record: whole, or without its messages (said in ``stats.notes``).

    Segments, task, artifacts and final text stay: trainers and evaluators read them. Raises
    ``RecordTooLargeError`` when even that does not fit.
    """
    value = serializer.encode(trajectory)
    size = record_size(key, value)
    if size <= budget:
        return Encoded(value)
    what = f"the trajectory {trajectory.trajectory_id}"
    if trajectory.messages is not None:
        left_out = ["messages"]
        note = _note(what, size, budget, left_out)
        value = serializer.encode(_noted(trajectory, note, messages=None))
        if record_size(key, value) <= budget:
            return Encoded(value, left_out)
        what += " without its messages"
    raise RecordTooLargeError(what, record_size(key, value), budget)


def encode_scored(
    serializer: AvroSerializer, key: bytes, scored: Scored, budget: int = RECORD_BUDGET_BYTES
) -> Encoded:
    """The Scored record: whole, or with bulky parts left out one by one until it fits.

    In order: the trajectory's messages, the evaluator's details, the session's artifacts; the
    reward, the segments and the rest stay. Left-out parts are named in ``details["oversized"]``
    and the trajectory's ``stats.notes``. Raises ``RecordTooLargeError`` when nothing fits.
    """
    value = serializer.encode(scored)
    size = record_size(key, value)
    if size <= budget:
        return Encoded(value)
    what = f"the Scored record of {scored.trajectory.trajectory_id}"
    trajectory, details = scored.trajectory, dict(scored.details)
    left_out: list[str] = []
    candidates: list[tuple[str, bool]] = [
        ("messages", trajectory.messages is not None),
        ("details", bool(details)),
        ("artifacts", bool(trajectory.artifacts)),
    ]
    for part, present in candidates:
        if not present:
            continue
        left_out.append(part)
        if part == "messages":
            trajectory = trajectory.model_copy(update={"messages": None})
        elif part == "details":
            details = {}
        else:
            trajectory = trajectory.model_copy(update={"artifacts": []})
        note = _note(what, size, budget, left_out)
        flagged = details | {"oversized": note}
        noted = _noted(trajectory, note)
        slim = scored.model_copy(update={"trajectory": noted, "details": flagged})
        value = serializer.encode(slim)
        if record_size(key, value) <= budget:
            return Encoded(value, left_out)
    if left_out:
        what += f" without its {', '.join(left_out)}"
    raise RecordTooLargeError(what, record_size(key, value), budget)
