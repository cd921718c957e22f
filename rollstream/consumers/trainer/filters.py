"""The filters of :class:`TrainerSettings`: which finished groups a trainer never sees.

Applied when a group is handed out (complete, or partial after a timeout), after the staleness
check: a group is dropped as a whole, never trimmed, because GRPO normalises each reward
against the others of its group, and leaving out some samples (say the sessions that timed
out, all with reward 0) would shift the advantages of the rest. A dropped group is finished
like a stale one: counted in :class:`~rollstream.consumers.trainer.groups.StreamMetrics` by reason,
and committed past. In batches mode the per-trajectory filters judge each record alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from rollstream.consumers.trainer.settings import TrainerSettings
from rollstream.schemas import Scored

FilterReason = Literal["status", "uniform", "tokens"]
"""Why a group was filtered out; ``StreamMetrics.dropped_<reason>`` counts it."""


def uniform_rewards(records: Sequence[Scored]) -> bool:
    """Whether the scored rewards are all equal (or fewer than two are scored).

    Exactly when :func:`~rollstream.consumers.trainer.batch.group_advantages` gives every
    record of the group advantage 0: such a group carries no GRPO signal.
    """
    scored = {r.reward for r in records if r.reward is not None}
    return len(scored) < 2


def rejected_record(record: Scored, settings: TrainerSettings) -> FilterReason | None:
    """Why the per-trajectory filters drop ``record`` (statuses, min_trainable_tokens); or None."""
    trajectory = record.trajectory
    if settings.statuses is not None and trajectory.status not in settings.statuses:
        return "status"
    if (
        settings.session_statuses is not None
        and trajectory.session_status not in settings.session_statuses
    ):
        return "status"
    wanted = settings.min_trainable_tokens
    if wanted and trajectory.trainable_tokens < wanted:
        return "tokens"
    return None


def filter_records(
    records: Sequence[Scored], settings: TrainerSettings
) -> tuple[tuple[Scored, ...], Counter[FilterReason]]:
    """The records the per-trajectory filters keep (batches mode), and the drops by reason."""
    kept: list[Scored] = []
    dropped: Counter[FilterReason] = Counter()
    for record in records:
        reason = rejected_record(record, settings)
        if reason is None:
            kept.append(record)
        else:
            dropped[reason] += 1
    return tuple(kept), dropped


def rejected_group(records: Sequence[Scored], settings: TrainerSettings) -> FilterReason | None:
    """Why the filters drop the group of ``records``; None keeps it.

    The first reason that applies, in this order: a trajectory of a status not kept, a
    trajectory with too few trainable tokens (or too few in all), rewards all equal.
    Trainable tokens are those with loss mask 1, as ``Batch.metrics["trainable_tokens"]``
    counts them before any ``max_len`` truncation, missing logprobs included.
    """
    reasons = [rejected_record(r, settings) for r in records]
    if "status" in reasons:
        return "status"
    if "tokens" in reasons:
        return "tokens"
    wanted = settings.min_group_trainable_tokens
    if wanted and sum(r.trajectory.trainable_tokens for r in records) < wanted:
        return "tokens"
    if settings.drop_uniform_rewards and uniform_rewards(records):
        return "uniform"
    return None
