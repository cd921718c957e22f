"""Harbor tasks (the task format of Harbor and Terminal-Bench) and the tasks made of them.

A Harbor task is a directory: ``instruction.md`` (what the agent is told), ``task.toml`` (its
settings), ``environment/`` (a ``Dockerfile`` building the container the agent works in) and
``tests/`` (``test.sh``, run in that container after the agent, writing the reward to
``/logs/verifier/reward.txt`` or ``reward.json``). A dataset is a directory of such tasks.

``to_task`` turns one into a Task for the docker runtime:

- the image is ``[environment].docker_image``, else the one given (``rollstream run --image``):
  rollstream does not build the Dockerfile, whose base images come from a registry (build it
  with ``docker build -t NAME TASK/environment`` and pass ``--image NAME``);
- the agent works where the task expects, the image's working directory (``[environment].workdir``,
  else the Dockerfile's last ``WORKDIR``): a setup command moves that directory's files into the
  session's workspace and leaves a link in its place, so the session's diff holds the agent's
  work and the tests find it where they look;
- the ``harbor`` evaluator runs ``tests/`` (carried in the task, so any scorer has them) as
  Harbor's verifier does and reads the reward the tests write.

Multi-step tasks (``steps/``) are refused: one instruction per session is what a Task holds.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rollstream.schemas.tasks import CONTAINER_MARK, EvaluatorSpec, Task

#: The evaluator kind that judges Harbor tasks (``consumers/score/evaluators/harbor.py``).
HARBOR_EVALUATOR = "harbor"
CONFIG = "task.toml"
INSTRUCTION = "instruction.md"
#: More than this in ``tests/`` is refused: the files travel in every Task record.
MAX_TESTS_BYTES = 1 << 20


class HarborTaskError(ValueError):
    """A directory that is no Harbor task rollstream can run, and why."""


def is_harbor_task(path: Path) -> bool:
    """Whether ``path`` is a Harbor task directory."""
    return path.is_dir() and (path / CONFIG).is_file() and (path / INSTRUCTION).is_file()


def harbor_task_dirs(path: Path) -> list[Path]:
    """The task directories of ``path``: itself if it is one, else its sub-directories that are."""
    if is_harbor_task(path):
        return [path]
    return sorted(p for p in path.iterdir() if is_harbor_task(p))


def workdir_of(dockerfile: str) -> str | None:
    """The working directory a Dockerfile leaves its image in (its last ``WORKDIR``), or None.

    A relative ``WORKDIR`` is taken from the one before it, as Docker does; each ``FROM`` starts
    a stage from its base's (unknown here, so none).
    """
    workdir: str | None = None
    for line in dockerfile.splitlines():
        words = line.strip().split(maxsplit=1)
        if words and words[0].upper() == "FROM":
            workdir = None
        elif len(words) == 2 and words[0].upper() == "WORKDIR":
            value = words[1].strip().strip("\"'")
            workdir = value if value.startswith("/") else f"{workdir or ''}/{value}"
    return workdir


def adopt_workdir(workdir: str) -> str:
    """The setup command that makes ``workdir`` the session's workspace, in a container only.

    Its files move into the workspace (the current directory), and ``workdir`` becomes a link to
    it. Outside a container of the docker runtime (which sets ``ROLLSTREAM_SANDBOX_CONTAINER``) it
    does nothing: a host's own directories are never touched, even a host that is a container.
    """
    quoted = shlex.quote(workdir.rstrip("/") or "/")
    return (
        f'if [ "${{{CONTAINER_MARK}:-}}" = 1 ] && [ -d {quoted} ] && [ ! -L {quoted} ]; then '
        f'cp -a {quoted}/. . && rm -rf {quoted} && ln -s "$PWD" {quoted}; fi'
    )


def _tests(task_dir: Path) -> dict[str, str]:
    tests = task_dir / "tests"
    files = {}
    size = 0
    for path in sorted(tests.rglob("*")):
        if not path.is_file():
            continue
        size += path.stat().st_size
        if size > MAX_TESTS_BYTES:
            raise HarborTaskError(f"{tests} holds more than {MAX_TESTS_BYTES} bytes")
        try:
            files[path.relative_to(tests).as_posix()] = path.read_text()
        except UnicodeDecodeError:
            raise HarborTaskError(f"{path} is not text: tests travel in the task as text") from None
    if "test.sh" not in files:
        raise HarborTaskError(f"{tests}/test.sh is missing: nothing would judge the work")
    return files


def _strings(table: Any) -> dict[str, str]:
    if not isinstance(table, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in table.items()}


def to_task(
    task_dir: Path,
    *,
    harness: str,
    samples: int = 1,
    image: str | None = None,
    submitted_at: datetime | None = None,
) -> Task:
    """The task of the Harbor task directory ``task_dir``; HarborTaskError if it cannot run.

    ``image`` is used when ``task.toml`` names no ``docker_image``.
    """
    try:
        config = tomllib.loads((task_dir / CONFIG).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise HarborTaskError(f"{task_dir / CONFIG}: {exc}") from None
    if config.get("steps") or (task_dir / "steps").is_dir():
        raise HarborTaskError(f"{task_dir}: multi-step tasks are not supported")
    environment = config.get("environment") or {}
    dockerfile = task_dir / "environment" / "Dockerfile"
    chosen = environment.get("docker_image") or image
    if not chosen:
        raise HarborTaskError(
            f"{task_dir} names no docker_image and none was given: build its environment "
            f"(docker build -t NAME {task_dir / 'environment'}) and pass --image NAME"
        )
    workdir = environment.get("workdir") or (
        workdir_of(dockerfile.read_text()) if dockerfile.is_file() else None
    )
    name = (config.get("task") or {}).get("name") or task_dir.resolve().name
    agent = config.get("agent") or {}
    verifier = config.get("verifier") or {}
    evaluator = {"tests": json.dumps(_tests(task_dir))}
    if verifier.get("timeout_sec"):
        evaluator["timeout"] = f"{float(verifier['timeout_sec']):g}"
    if verifier.get("env"):
        evaluator["env"] = json.dumps(_strings(verifier["env"]))
    metadata = {f"harbor.{k}": v for k, v in _strings(config.get("metadata")).items()}
    metadata["harbor.task"] = str(name)
    fields: dict[str, Any] = {}
    if agent.get("timeout_sec"):
        fields["agent_timeout_s"] = float(agent["timeout_sec"])
    return Task(
        task_id=str(name).replace("/", "__"),
        group_id=str(name).replace("/", "__"),
        instruction=(task_dir / INSTRUCTION).read_text(),
        samples=samples,
        harness=harness,
        setup=[adopt_workdir(workdir)] if workdir and workdir != "/" else [],
        evaluator=EvaluatorSpec(kind=HARBOR_EVALUATOR, config=evaluator),
        env=_strings(environment.get("env")),
        image=str(chosen),
        metadata=metadata,
        submitted_at=submitted_at or datetime.now(UTC),
        **fields,
    )
