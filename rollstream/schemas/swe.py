"""SWE-style task instances (the SWE-bench and SWE-Gym format) and the tasks made of them.

An instance names a repository and a base commit, states a problem, and says how to judge a fix:
a test patch to apply, the tests it makes fail until the problem is solved (``FAIL_TO_PASS``) and
the tests that must keep passing (``PASS_TO_PASS``). Both lists come as JSON strings in the
published datasets and as lists elsewhere; either is read. Three extensions of the format:
``image`` names the container image the sessions and the check run in, ``test_command`` the
command that runs the tests in it (the ``swe`` evaluator's pytest by default), ``metadata`` the
task's metadata (a harness's options, the context mode).

``to_task`` turns an instance into a Task: a ``git`` workspace at the base commit, the problem
statement as the instruction, and the ``swe`` evaluator configured with the test patch and the two
test lists. The repository is found through a template (``{repo}``, ``{owner}``, ``{name}``),
since instances name a GitHub repository that a cluster usually mirrors somewhere of its own.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from rollstream.schemas.base import Model
from rollstream.schemas.tasks import EvaluatorSpec, Task, Workspace, WorkspaceKind

#: Where instances' repositories are cloned from unless told otherwise.
GITHUB_REPOS = "https://github.com/{repo}.git"
#: The evaluator kind that judges SWE-style tasks.
SWE_EVALUATOR = "swe"
#: The instance's own fields kept in the task's metadata (what a report groups by).
_METADATA = ("instance_id", "repo", "base_commit", "version", "environment_setup_commit")


class SweInstance(Model):
    """One SWE-style instance; fields of the format that rollstream does not use are kept."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    base_commit: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    test_patch: str = Field(min_length=1)
    fail_to_pass: list[str] = Field(alias="FAIL_TO_PASS", min_length=1)
    pass_to_pass: list[str] = Field(default_factory=list, alias="PASS_TO_PASS")
    version: str | None = None
    environment_setup_commit: str | None = None
    image: str | None = None
    test_command: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("fail_to_pass", "pass_to_pass", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        """The datasets store the test lists as JSON text: decode it."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON list of test ids: {exc}") from None
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        """Some datasets write the version as a number (``0.12`` read as a float)."""
        return str(value) if isinstance(value, int | float) else value


def is_swe_instance(document: Any) -> bool:
    """Whether a loaded document is an SWE-style instance rather than a task document."""
    return isinstance(document, dict) and "instance_id" in document and "base_commit" in document


def repository_location(repo: str, template: str = GITHUB_REPOS) -> str:
    """Where to clone ``repo`` (``owner/name``) from, by ``template``."""
    owner, _, name = repo.partition("/")
    return template.format(repo=repo, owner=owner, name=name or owner)


def to_task(
    instance: SweInstance,
    *,
    harness: str,
    samples: int = 1,
    repos: str = GITHUB_REPOS,
    image: str | None = None,
    submitted_at: datetime | None = None,
) -> Task:
    """The task of ``instance``: its repository at the base commit, judged by ``swe``.

    ``image`` is used when the instance names none; ``repos`` is the repository template.
    """
    config = {
        "test_patch": instance.test_patch,
        "fail_to_pass": json.dumps(instance.fail_to_pass),
        "pass_to_pass": json.dumps(instance.pass_to_pass),
    }
    if instance.test_command:
        config["test_command"] = instance.test_command
    metadata = instance.metadata | {
        f"swe.{key}": str(value)
        for key in _METADATA
        if (value := getattr(instance, key)) is not None
    }
    return Task(
        task_id=instance.instance_id,
        group_id=instance.instance_id,
        instruction=instance.problem_statement,
        samples=samples,
        harness=harness,
        workspace=Workspace(
            kind=WorkspaceKind.GIT,
            path=repository_location(instance.repo, repos),
            commit=instance.base_commit,
        ),
        evaluator=EvaluatorSpec(kind=SWE_EVALUATOR, config=config),
        image=instance.image or image,
        metadata=metadata,
        submitted_at=submitted_at or datetime.now(UTC),
    )
