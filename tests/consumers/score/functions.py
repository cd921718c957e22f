"""Functions the ``python`` evaluator tests name as ``tests.consumers.score.functions:NAME``."""

from __future__ import annotations

from rollstream.schemas import Task, Trajectory


def length_reward(trajectory: Trajectory, task: Task | None) -> float:
    return len(trajectory.final_text) / 10


def with_details(trajectory: Trajectory, task: Task | None) -> dict[str, object]:
    return {"reward": 0.25, "task": task.task_id if task else None, "tokens": 3}


def no_reward_key(trajectory: Trajectory, task: Task | None) -> dict[str, object]:
    return {"score": 1}


def not_a_number(trajectory: Trajectory, task: Task | None) -> str:
    return "high"


def not_finite(trajectory: Trajectory, task: Task | None) -> float:
    return float("nan")


def explodes(trajectory: Trajectory, task: Task | None) -> float:
    raise ValueError("the grader broke")


def verbose(trajectory: Trajectory, task: Task | None) -> dict[str, object]:
    """A reward with a long log in its details (a Scored record a few KiB past its trajectory)."""
    return {"reward": 1.0, "log": "checked " * 1000}


NOT_CALLABLE = 3
