"""Reward functions the example-trainer tests score with (the ``python`` evaluator)."""

from __future__ import annotations

from rollstream.schemas import Task, Trajectory


def final_length(trajectory: Trajectory, task: Task | None) -> float:
    """Longer final answers score higher: a reward that differs across a group's samples."""
    return float(len(trajectory.final_text))
