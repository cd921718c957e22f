"""Harbor tasks in real containers: the image built from the task's Dockerfile, as a user would.

The task's image works in /app and holds a file of its own there; its tests look for the
agent's file beside it and write the reward where Harbor's verifier reads it. A session's work
is scored in a fresh container of that image: 1.0 when the tests find it, 0.0 when not, no
reward when the tests write none. Then a real harness (Codex) runs the task the node's way,
in a container of the image, and its session scores 1.0.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from rollstream.consumers.score.evaluators import EvalResult, evaluate
from rollstream.dev.containers import DockerEngine, ImageResult
from rollstream.producers.node.session import SessionRunner
from rollstream.producers.node.settings import NodeSettings
from rollstream.sandbox.docker import DockerRuntime
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.runtime import LocalRuntime
from rollstream.schemas import SessionStatus, Task, TopicNames
from rollstream.schemas.harbor import to_task
from rollstream.settings import KafkaSettings
from tests.consumers.score.test_swe import Edit, session_diff
from tests.harbor_tasks import write_task
from tests.harness_stack import harnesses_installed, scripted_interceptor
from tests.producers.node.helpers import Sink
from tests.schemas.samples import TRAJECTORY

pytestmark = pytest.mark.integration
IMAGE = "rollstream-harbor-hello:test"


@pytest.fixture(scope="module")
def harbor_task(
    docker_engine: DockerEngine, docker_base: ImageResult, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Task]:
    """The task, its image built from its Dockerfile (FROM the local Debian base)."""
    docker = pytest.importorskip("docker")
    directory = write_task(tmp_path_factory.mktemp("harbor"), base=docker_base.tag)
    client: Any = docker.DockerClient(base_url=docker_engine.docker_host)
    try:
        client.images.build(
            path=str(directory / "environment"), tag=IMAGE, rm=True, network_mode="host"
        )
        yield to_task(directory, harness="codex", image=IMAGE)
    finally:
        client.close()


@pytest.fixture
async def runtime(docker_engine: DockerEngine, tmp_path: Path) -> AsyncIterator[DockerRuntime]:
    """A scorer's runtime (no network), of the task's image."""
    docker = pytest.importorskip("docker")
    client = docker.DockerClient(base_url=docker_engine.docker_host)
    made = DockerRuntime(IMAGE, tmp_path / "scoring", network="none", client=client)
    yield made
    await made.close()
    client.close()


def hello(work: Path) -> None:
    (work / "hello.txt").write_text("polar\n")


def wrong(work: Path) -> None:
    (work / "hello.txt").write_text("arctic\n")


async def _score(tmp_path: Path, task: Task, edit: Edit, runtime: Any) -> EvalResult:
    artifact = await session_diff(tmp_path, task, edit)
    trajectory = TRAJECTORY.model_copy(update={"task": task, "artifacts": [artifact]})
    assert task.evaluator is not None
    return await evaluate(trajectory, task.evaluator, timeout_s=120, runtime=runtime)


async def test_the_tests_reward_is_the_reward_in_the_tasks_container(
    harbor_task: Task, runtime: DockerRuntime, tmp_path: Path
) -> None:
    solved = await _score(tmp_path / "a", harbor_task, hello, runtime)
    assert (solved.reward, solved.error) == (1.0, None), solved
    assert solved.details["exit_code"] == "0"
    missed = await _score(tmp_path / "b", harbor_task, wrong, runtime)
    assert (missed.reward, missed.error) == (0.0, None)
    # Tests that write no reward: no reward, not a 0.
    assert harbor_task.evaluator is not None
    silent = harbor_task.model_copy(
        update={
            "evaluator": harbor_task.evaluator.model_copy(
                update={"config": {"tests": json.dumps({"test.sh": "exit 3\n"})}}
            )
        }
    )
    none = await _score(tmp_path / "c", silent, hello, runtime)
    assert none.reward is None and none.error is not None and "wrote no reward" in none.error
    assert none.details["exit_code"] == "3"


async def test_on_the_host_the_tests_are_not_run(harbor_task: Task, tmp_path: Path) -> None:
    result = await _score(tmp_path, harbor_task, hello, LocalRuntime(tmp_path / "host"))
    assert result.reward is None and result.error is not None
    assert "docker runtime" in result.error


async def test_a_real_harness_solves_the_harbor_task_in_its_container(
    harbor_task: Task,
    docker_engine: DockerEngine,
    runtime: DockerRuntime,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    """Codex in a container of the task's image, through the interceptor; the scorer's 1.0."""
    docker = pytest.importorskip("docker")
    harness_bin = harnesses_installed()
    client: Any = docker.DockerClient(base_url=docker_engine.docker_host)
    sessions = DockerRuntime(
        IMAGE, tmp_path / "sessions", mounts=[harness_bin.parents[1]], client=client
    )
    sink = Sink()
    try:
        async with scripted_interceptor(kafka_settings, tmp_path / "state") as interceptor:
            node = NodeSettings(work_root=tmp_path / "sessions", base_url=interceptor.url)
            runner = SessionRunner(
                node,
                sessions,
                sink.emit,
                sink.calls_of,
                executable=lambda name: harness_bin / PACKAGES[name][1],
            )
            ended = await runner.run_one(harbor_task, 0)
    finally:
        await sessions.close()
        client.close()
    assert ended.status is SessionStatus.COMPLETED, ended.error
    [artifact] = [a for a in ended.artifacts if a.name == "workspace.diff"]
    # The session's work alone: the image's own file came with the workspace, unchanged.
    assert b"hello.txt" in artifact.content and b"seed.txt" not in artifact.content
    trajectory = TRAJECTORY.model_copy(update={"task": harbor_task, "artifacts": [artifact]})
    assert harbor_task.evaluator is not None
    result = await evaluate(trajectory, harbor_task.evaluator, timeout_s=120, runtime=runtime)
    assert (result.reward, result.error) == (1.0, None), result
