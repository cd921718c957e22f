"""``rollstream run --tasks``: JSON Lines of task documents and SWE-style instances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollstream.cli.tasks_file import Overrides, TasksFileError, task_document, task_documents
from tests.schemas.test_swe import _instance

PLAIN = {"task_id": "t-1", "instruction": "say hi", "harness": "pi", "samples": 2}


def _file(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_plain_tasks_and_swe_instances_mix_and_take_the_overrides(tmp_path: Path) -> None:
    path = _file(tmp_path, PLAIN, "", _instance(), {**PLAIN, "task_id": "t-2", "image": "own:1"})
    docs = task_documents(path, Overrides("codex", 4, repos="/m/{name}", image="img:1"))
    assert [d["task_id"] for d in docs] == ["t-1", "astropy__astropy-12907", "t-2"]
    assert [d["samples"] for d in docs] == [4, 4, 4]
    assert [d.get("image") for d in docs] == ["img:1", "img:1", "own:1"]
    swe = docs[1]
    assert [d["harness"] for d in docs] == ["codex"] * 3
    assert swe["workspace"] == {
        "kind": "git",
        "files": {},
        "path": "/m/astropy",
        "commit": _instance()["base_commit"],
    }
    assert swe["evaluator"]["kind"] == "swe" and "submitted_at" not in swe


def test_an_swe_instance_needs_a_harness_from_the_command_line(tmp_path: Path) -> None:
    with pytest.raises(TasksFileError, match=r"tasks.jsonl:2: .*pass --harness"):
        task_documents(_file(tmp_path, PLAIN, _instance()), Overrides())
    [doc] = task_documents(_file(tmp_path, _instance()), Overrides(harness="codex"))
    assert doc["harness"] == "codex"


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ("{not json", r"tasks.jsonl:1: Expecting property name"),
        ("[1, 2]", r"tasks.jsonl:1: a line must be a JSON object"),
        (json.dumps(_instance(FAIL_TO_PASS="[]")), r"(?s)tasks.jsonl:1: .*FAIL_TO_PASS"),
    ],
)
def test_a_bad_line_is_named_before_anything_is_submitted(
    tmp_path: Path, line: str, complaint: str
) -> None:
    with pytest.raises(TasksFileError, match=complaint):
        task_documents(_file(tmp_path, line, PLAIN), Overrides(harness="pi"))


def test_an_empty_file_has_no_tasks(tmp_path: Path) -> None:
    with pytest.raises(TasksFileError, match="no tasks"):
        task_documents(_file(tmp_path, ""), Overrides())


def test_one_task_file_takes_the_same_overrides(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("instruction: hi\nharness: pi\n")
    assert task_document(path, Overrides(harness="codex", samples=3, image="i:1")) == {
        "instruction": "hi",
        "harness": "codex",
        "samples": 3,
        "image": "i:1",
    }
    path.write_text("- a list\n")
    with pytest.raises(TasksFileError, match="must be a mapping"):
        task_document(path, Overrides())
