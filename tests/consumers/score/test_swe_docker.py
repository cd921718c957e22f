"""The swe evaluator in containers: the task's image (not the scorer's), no network, fresh ones.

The scorer's own image is busybox, which has no Python: a check that ran there could not run
pytest at all. The instance names the Debian base image (python3, pytest, git) as its image.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.containers import DockerEngine, ImageResult
from rollstream.sandbox.docker import LABEL, DockerRuntime
from tests.consumers.score.test_swe import (
    game_the_test,
    leave,
    score_session,
    solve,
    solve_but_break_titleize,
    swe_task,
)
from tests.swe_project import SweProject, build

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SweProject:
    """The instance and its repository, built once for the module."""
    return build(tmp_path_factory.mktemp("swe"))


@pytest.fixture
async def runtime(
    docker_engine: DockerEngine, docker_busybox: ImageResult, docker_base: ImageResult
) -> AsyncIterator[DockerRuntime]:
    """The scorer's runtime as ROLLSTREAM_SCORE_RUNTIME=docker makes it, on busybox."""
    docker = pytest.importorskip("docker")
    client = docker.DockerClient(base_url=docker_engine.docker_host)
    made = DockerRuntime(docker_busybox.tag, network="none", cpus=1.0, memory="1g", client=client)
    yield made
    await made.close()
    client.close()


def _ours(client: Any) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": LABEL}))


async def test_a_scripted_group_scores_one_and_zeros_in_the_tasks_image(
    project: SweProject, runtime: DockerRuntime, docker_base: ImageResult, tmp_path: Path
) -> None:
    task = swe_task(project, image=docker_base.tag)
    assert task.image == docker_base.tag
    rewards = {}
    for edit in (solve, leave, solve_but_break_titleize, game_the_test):
        result = await score_session(tmp_path, task, edit, runtime)
        assert result.error is None, (edit.__name__, result)
        rewards[edit.__name__] = result.reward
    assert rewards == {
        "solve": 1.0,
        "leave": 0.0,
        "solve_but_break_titleize": 0.0,
        "game_the_test": 0.0,
    }
    assert _ours(runtime.client) == []  # a fresh container per evaluation, each removed


async def test_without_the_tasks_image_the_scorers_own_cannot_run_the_tests(
    project: SweProject, runtime: DockerRuntime, tmp_path: Path
) -> None:
    result = await score_session(tmp_path, swe_task(project), solve, runtime)
    assert result.reward is None  # busybox has no python3: not the policy's doing
    assert result.error is not None
