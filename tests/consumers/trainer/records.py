"""Scored records for the trainer tests, built from the schema samples."""

from __future__ import annotations

from rollstream.schemas import Scored
from tests.schemas.samples import SCORED, TASK, TRAJECTORY


def scored(
    group: str,
    index: int,
    *,
    samples: int = 3,
    reward: float | None = 1.0,
    versions: list[int] | None = None,
    task_id: str | None = None,
    with_task: bool = True,
) -> Scored:
    """Sample ``index`` of ``group`` (a real task with ``samples=N`` unless ``with_task=False``)."""
    task_id = task_id or f"task-{group}"
    task = (
        TASK.model_copy(update={"task_id": task_id, "group_id": group, "samples": samples})
        if with_task
        else None
    )
    trajectory = TRAJECTORY.model_copy(
        update={
            "trajectory_id": f"{task_id}/{group}/{index}",
            "session_id": f"sess-{group}-{index}",
            "task_id": task_id,
            "group_id": group,
            "sample_index": index,
            "task": task,
            "policy_versions": [7] if versions is None else versions,
        }
    )
    return SCORED.model_copy(update={"trajectory": trajectory, "reward": reward})


def group_of(
    group: str,
    samples: int,
    *,
    rewards: list[float | None] | None = None,
    versions: list[int] | None = None,
    with_task: bool = True,
) -> list[Scored]:
    """Every sample of a group, with ``rewards`` (default 1.0 each)."""
    rewards = rewards if rewards is not None else [1.0] * samples
    return [
        scored(group, i, samples=samples, reward=rewards[i], versions=versions, with_task=with_task)
        for i in range(samples)
    ]
