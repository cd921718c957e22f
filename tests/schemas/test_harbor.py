"""Harbor task directories as Tasks: what is read from where, and what is refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rollstream.cli.tasks_file import Overrides, TasksFileError, task_documents
from rollstream.schemas.harbor import (
    HarborTaskError,
    adopt_workdir,
    harbor_task_dirs,
    to_task,
    workdir_of,
)
from rollstream.schemas.tasks import CONTAINER_MARK, Task
from tests.harbor_tasks import HELLO_TEST, write_task


def test_a_task_directory_becomes_a_task_judged_by_its_tests(tmp_path: Path) -> None:
    directory = write_task(tmp_path, toml='\n[task]\nname = "demo/hello"\n')
    (directory / "tests" / "data").mkdir()
    (directory / "tests" / "data" / "expected.txt").write_text("polar\n")
    task = to_task(directory, harness="codex", samples=4, image="hello:1")
    assert (task.task_id, task.group_id, task.samples, task.harness) == (
        "demo__hello",
        "demo__hello",
        4,
        "codex",
    )
    assert task.instruction == "Create hello.txt with polar."
    assert task.image == "hello:1" and task.agent_timeout_s == 240.0
    assert task.setup == [adopt_workdir("/app")]
    assert task.evaluator is not None and task.evaluator.kind == "harbor"
    assert json.loads(task.evaluator.config["tests"]) == {
        "test.sh": HELLO_TEST,
        "data/expected.txt": "polar\n",
    }
    assert task.evaluator.config["timeout"] == "120"
    assert task.metadata == {"harbor.difficulty": "easy", "harbor.task": "demo/hello"}


def test_the_tasks_own_image_and_workdir_come_first(tmp_path: Path) -> None:
    toml = '\n[environment]\ndocker_image = "own:2"\nworkdir = "/srv"\nenv = { A = "1" }\n'
    task = to_task(write_task(tmp_path, toml=toml), harness="codex", image="given:1")
    assert (task.image, task.setup, task.env) == ("own:2", [adopt_workdir("/srv")], {"A": "1"})
    assert task.task_id == "hello"  # the directory's name, where task.toml names none


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: None, "names no docker_image and none was given"),
        (lambda d: (d / "steps" / "one").mkdir(parents=True), "multi-step"),
        (lambda d: (d / "tests" / "test.sh").unlink(), "test.sh is missing"),
        (lambda d: (d / "tests" / "blob").write_bytes(b"\xff\xfe"), "is not text"),
        (lambda d: (d / "task.toml").write_text("version = "), "task.toml"),
    ],
)
def test_what_cannot_run_is_refused_with_its_reason(
    tmp_path: Path, change: object, match: str
) -> None:
    directory = write_task(tmp_path)
    assert callable(change)
    change(directory)
    image = None if "docker_image" in match else "hello:1"
    with pytest.raises(HarborTaskError, match=match):
        to_task(directory, harness="codex", image=image)


def test_the_workdir_is_the_dockerfiles_last() -> None:
    assert workdir_of("FROM x\nWORKDIR /a\nRUN true\nworkdir b\n") == "/a/b"
    assert workdir_of('FROM x\nWORKDIR "/srv/app"\n') == "/srv/app"
    assert workdir_of("FROM x\nRUN true\n") is None
    # A multi-stage build: the last stage's own, not the builder's.
    assert (
        workdir_of("FROM x AS build\nWORKDIR /src\nFROM y\nCOPY --from=build /src /opt\n") is None
    )


def test_a_dataset_is_its_task_directories_and_needs_a_harness(tmp_path: Path) -> None:
    for name in ("b-task", "a-task"):
        write_task(tmp_path / "set", name)
    (tmp_path / "set" / "notes").mkdir()
    assert [p.name for p in harbor_task_dirs(tmp_path / "set")] == ["a-task", "b-task"]
    documents = task_documents(tmp_path / "set", Overrides(harness="pi", image="hello:1"))
    assert [
        Task.model_validate(d | {"submitted_at": "2026-12-06T00:00:00Z"}).task_id for d in documents
    ] == [
        "a-task",
        "b-task",
    ]
    with pytest.raises(TasksFileError, match="pass --harness"):
        task_documents(tmp_path / "set", Overrides(image="hello:1"))
    with pytest.raises(TasksFileError, match="names no docker_image"):
        task_documents(tmp_path / "set", Overrides(harness="pi"))
    with pytest.raises(TasksFileError, match="no Harbor task"):
        task_documents(tmp_path / "set" / "notes", Overrides(harness="pi"))


def test_the_workdir_is_adopted_only_in_a_runtime_container(tmp_path: Path) -> None:
    """On a host (this one may itself be a container) the setup command touches nothing."""
    image_dir, work = tmp_path / "app", tmp_path / "work"
    image_dir.mkdir()
    work.mkdir()
    (image_dir / "seed.txt").write_text("seed\n")
    script = adopt_workdir(str(image_dir))
    subprocess.run(["bash", "-c", script], cwd=work, check=True, env={"PATH": "/usr/bin:/bin"})
    assert image_dir.is_dir() and not image_dir.is_symlink() and not any(work.iterdir())
    marked = {"PATH": "/usr/bin:/bin", CONTAINER_MARK: "1"}
    subprocess.run(["bash", "-c", script], cwd=work, check=True, env=marked)
    assert (work / "seed.txt").read_text() == "seed\n"
    assert image_dir.is_symlink() and image_dir.resolve() == work.resolve()
    subprocess.run(["bash", "-c", script], cwd=work, check=True, env=marked)  # again: a no-op
    assert (image_dir / "seed.txt").read_text() == "seed\n"
