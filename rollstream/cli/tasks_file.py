"""``rollstream run --tasks PATH``: task documents, SWE-style instances, or Harbor tasks.

A file is JSON Lines: each line a task document (as ``--task`` takes) or an instance in the
SWE-bench format, told apart by its ``instance_id`` and ``base_commit``; an instance becomes a
task through ``rollstream.schemas.swe.to_task``. A line that is neither says so with its file and
line number, before anything is submitted. A directory is a Harbor task (``task.toml``,
``instruction.md``) or a dataset of them, each made a task by ``rollstream.schemas.harbor.to_task``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rollstream.schemas import harbor
from rollstream.schemas.swe import GITHUB_REPOS, SweInstance, is_swe_instance, to_task


class TasksFileError(ValueError):
    """A line of a tasks file that is no task: where, and why."""


@dataclass(frozen=True)
class Overrides:
    """What the command line sets on every task of the file (None: each line's own)."""

    harness: str | None = None
    samples: int | None = None
    repos: str = GITHUB_REPOS
    image: str | None = None


def _swe_document(instance: dict[str, Any], overrides: Overrides) -> dict[str, Any]:
    if overrides.harness is None:
        raise TasksFileError("an SWE-style instance names no harness: pass --harness")
    task = to_task(
        SweInstance.model_validate(instance),
        harness=overrides.harness,
        samples=overrides.samples or 1,
        repos=overrides.repos,
        image=overrides.image,
    )
    # The node stamps its own submission time.
    return task.model_dump(mode="json", exclude={"submitted_at"})


def apply_overrides(document: dict[str, Any], overrides: Overrides) -> None:
    """Set the command line's harness and samples, and its image where the task names none."""
    if overrides.harness:
        document["harness"] = overrides.harness
    if overrides.samples:
        document["samples"] = overrides.samples
    if overrides.image and "image" not in document:
        document["image"] = overrides.image


def task_document(path: Path, overrides: Overrides) -> dict[str, Any]:
    """The one task of a YAML or JSON file (``--task``), overrides applied."""
    import yaml  # the producers extra's; `rollstream --help` works without it

    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict):
        raise TasksFileError(f"{path}: a task must be a mapping")
    apply_overrides(document, overrides)
    return document


def harbor_documents(path: Path, overrides: Overrides) -> list[dict[str, Any]]:
    """The task documents of a Harbor task directory, or of a directory of them."""
    if overrides.harness is None:
        raise TasksFileError(f"{path}: a Harbor task names no harness: pass --harness")
    dirs = harbor.harbor_task_dirs(path)
    if not dirs:
        raise TasksFileError(f"{path}: no Harbor task (task.toml and instruction.md) here")
    documents = []
    for task_dir in dirs:
        try:
            task = harbor.to_task(
                task_dir,
                harness=overrides.harness,
                samples=overrides.samples or 1,
                image=overrides.image,
            )
        except (harbor.HarborTaskError, ValidationError, OSError) as exc:
            raise TasksFileError(str(exc)) from None
        documents.append(task.model_dump(mode="json", exclude={"submitted_at"}))
    return documents


def task_documents(path: Path, overrides: Overrides) -> list[dict[str, Any]]:
    """The task documents of ``path``, one per non-blank line, overrides applied.

    A directory holds Harbor tasks (``harbor_documents``).
    """
    if path.is_dir():
        return harbor_documents(path, overrides)
    documents = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
            if is_swe_instance(document):
                document = _swe_document(document, overrides)
            elif not isinstance(document, dict):
                raise TasksFileError("a line must be a JSON object")
            else:
                apply_overrides(document, overrides)
        except (json.JSONDecodeError, ValidationError, TasksFileError) as exc:
            raise TasksFileError(f"{path}:{number}: {exc}") from None
        documents.append(document)
    if not documents:
        raise TasksFileError(f"{path}: no tasks")
    return documents
