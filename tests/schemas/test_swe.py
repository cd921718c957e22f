"""SWE-style instances as the datasets publish them, and the tasks made of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from rollstream.schemas import Task, WorkspaceKind
from rollstream.schemas.swe import (
    SweInstance,
    is_swe_instance,
    repository_location,
    to_task,
)

F2P = ["tests/test_a.py::test_new[1 - 2]"]
P2P = ["tests/test_a.py::test_old", "tests/test_b.py::TestB::test_c"]


def _instance(**changes: Any) -> dict[str, Any]:
    """A line of a SWE-bench dataset: the test lists as JSON text, the fields it has."""
    return {
        "instance_id": "astropy__astropy-12907",
        "repo": "astropy/astropy",
        "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
        "patch": "diff --git a/x b/x\n",
        "test_patch": "diff --git a/tests/test_a.py b/tests/test_a.py\n",
        "problem_statement": "Modeling's separability_matrix is wrong for nested models.",
        "hints_text": "",
        "created_at": "2022-03-03T15:14:54Z",
        "version": 4.3,
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
        "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    } | changes


def test_a_dataset_line_reads_with_its_json_test_lists_and_keeps_the_rest() -> None:
    instance = SweInstance.model_validate(_instance())
    assert instance.fail_to_pass == F2P and instance.pass_to_pass == P2P
    assert instance.version == "4.3"  # a float in some datasets
    assert instance.model_extra is not None and instance.model_extra["hints_text"] == ""
    lists = SweInstance.model_validate(_instance(FAIL_TO_PASS=F2P, PASS_TO_PASS=[]))
    assert lists.fail_to_pass == F2P and lists.pass_to_pass == []


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"FAIL_TO_PASS": "[]"}, "at least 1 item"),
        ({"FAIL_TO_PASS": "tests/test_a.py::x"}, "not a JSON list of test ids"),
        ({"PASS_TO_PASS": json.dumps([3])}, "string"),
        ({"test_patch": ""}, "at least 1 character"),
    ],
)
def test_an_instance_that_cannot_be_judged_is_refused(
    changes: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValidationError, match=complaint):
        SweInstance.model_validate(_instance(**changes))
    missing = _instance()
    del missing["base_commit"]
    with pytest.raises(ValidationError, match="base_commit"):
        SweInstance.model_validate(missing)


def test_the_task_clones_the_repository_at_the_base_commit_and_is_judged_by_swe() -> None:
    at = datetime(2026, 12, 2, tzinfo=UTC)
    instance = SweInstance.model_validate(_instance(image="sweb.eval.astropy-12907:latest"))
    task = to_task(
        instance, harness="codex", samples=8, repos="/mirrors/{owner}__{name}", submitted_at=at
    )
    assert (task.task_id, task.group_id, task.samples) == (instance.instance_id,) * 2 + (8,)
    assert task.instruction == instance.problem_statement and task.harness == "codex"
    assert task.workspace.kind is WorkspaceKind.GIT
    assert task.workspace.path == "/mirrors/astropy__astropy"
    assert task.workspace.commit == instance.base_commit
    assert task.image == "sweb.eval.astropy-12907:latest"
    assert task.evaluator is not None and task.evaluator.kind == "swe"
    config = task.evaluator.config
    assert config["test_patch"] == instance.test_patch and "test_command" not in config
    assert json.loads(config["fail_to_pass"]) == F2P
    assert json.loads(config["pass_to_pass"]) == P2P
    assert task.metadata["swe.instance_id"] == instance.instance_id
    assert task.metadata["swe.version"] == "4.3"
    # It travels through Kafka like any task.
    assert Task.model_validate_json(task.model_dump_json()) == task


def test_the_image_and_test_command_extensions() -> None:
    plain = SweInstance.model_validate(_instance())
    assert to_task(plain, harness="pi").image is None
    assert to_task(plain, harness="pi", image="fallback:1").image == "fallback:1"
    own = SweInstance.model_validate(
        _instance(image="own:2", test_command="tox -e py -- -rA", metadata={"context": "exact"})
    )
    task = to_task(own, harness="pi", image="fallback:1")
    assert task.image == "own:2" and task.metadata["context"] == "exact"
    assert (
        task.evaluator is not None and task.evaluator.config["test_command"] == "tox -e py -- -rA"
    )


def test_repositories_and_instances_are_told_apart() -> None:
    assert repository_location("astropy/astropy") == "https://github.com/astropy/astropy.git"
    assert repository_location("o/n", "git@mirror:{owner}/{name}") == "git@mirror:o/n"
    assert is_swe_instance(_instance())
    assert not is_swe_instance({"instruction": "x", "harness": "pi"})
    assert not is_swe_instance(["instance_id", "base_commit"])
