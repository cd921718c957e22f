"""The swe evaluator on a real project's SWE-style instance, judged in local processes.

``tests/swe_project.py`` makes the instance (inflection from PyPI, a planted bug); scripted
sessions' diffs solve it, leave it, solve it but break another test, or game the test. The same
instance in containers: ``test_swe_docker.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rollstream.consumers.score.evaluators import EvalResult, evaluate
from rollstream.sandbox.runtime import LocalRuntime, Runtime
from rollstream.sandbox.workspace import baseline, diff, materialize
from rollstream.schemas import Artifact, Task
from rollstream.schemas.swe import SweInstance, to_task
from tests import swe_project
from tests.schemas.samples import TRAJECTORY
from tests.swe_project import SweProject

pytestmark = pytest.mark.integration

Edit = Callable[[Path], None]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> SweProject:
    """The instance and its repository, built once for the module."""
    return swe_project.build(tmp_path_factory.mktemp("swe"))


def swe_task(project: SweProject, **extensions: str) -> Task:
    """The instance's task as ``rollstream run --tasks`` makes it, repositories from the mirror."""
    instance = SweInstance.model_validate(project.instance | extensions)
    return to_task(instance, harness="python", repos=f"{project.mirrors}/{{owner}}__{{name}}")


def solve(work: Path) -> None:
    """The gold fix, as a harness would write it."""
    module = work / swe_project.MODULE
    module.write_text(module.read_text().replace(swe_project.PLANTED, swe_project.CORRECT))


def leave(work: Path) -> None:
    """A session that changed nothing."""


def solve_but_break_titleize(work: Path) -> None:
    """The fix, and another function broken on the way."""
    solve(work)
    with (work / swe_project.MODULE).open("a") as module:
        module.write(swe_project.BREAKS_TITLEIZE)


def game_the_test(work: Path) -> None:
    """No fix: the session makes dasherize's test assert nothing instead."""
    tests = work / swe_project.TESTS
    assertion = "    assert inflection.dasherize(input) == expected\n"
    assert assertion in tests.read_text()
    tests.write_text(tests.read_text().replace(assertion, "    assert True\n"))


async def session_diff(tmp_path: Path, task: Task, edit: Edit) -> Artifact:
    """The diff artifact a node produces for a session whose harness made ``edit``."""
    sandbox = await LocalRuntime(tmp_path).start(edit.__name__)
    work = sandbox.work
    await materialize(task.workspace, work)
    base = await baseline(work)
    edit(work)
    return await diff(LocalRuntime(), sandbox, base, 1 << 20, 60)


async def score_session(
    tmp_path: Path, task: Task, edit: Edit, runtime: Runtime | None = None
) -> EvalResult:
    """The session's diff scored by the task's evaluator."""
    artifact = await session_diff(tmp_path, task, edit)
    trajectory = TRAJECTORY.model_copy(update={"task": task, "artifacts": [artifact]})
    assert task.evaluator is not None
    return await evaluate(
        trajectory, task.evaluator, timeout_s=180, work_root=tmp_path / "scoring", runtime=runtime
    )


def local_task(project: SweProject) -> Task:
    """The task with the tests run by this interpreter (its pytest), as an instance can say."""
    return swe_task(project, test_command=f"{sys.executable} -m pytest -rA -p no:cacheprovider")


async def test_a_group_of_scripted_sessions_scores_as_they_solve_or_fail(
    project: SweProject, tmp_path: Path
) -> None:
    task = local_task(project)
    rewards = {}
    for edit in (solve, leave, solve_but_break_titleize, game_the_test):
        result = await score_session(tmp_path, task, edit)
        assert result.error is None, (edit.__name__, result)
        rewards[edit.__name__] = result.reward
        if edit is solve:
            assert result.details["fail_to_pass"] == "1/1"
            assert result.details["pass_to_pass"] == f"{len(swe_project.PASS_TO_PASS)}/6"
            assert json.loads(result.details["tests"]) == {swe_project.FAIL_TO_PASS[0]: "PASSED"}
    assert rewards == {
        "solve": 1.0,
        "leave": 0.0,
        "solve_but_break_titleize": 0.0,
        "game_the_test": 0.0,
    }


async def test_the_details_name_each_test_that_did_not_pass(
    project: SweProject, tmp_path: Path
) -> None:
    result = await score_session(tmp_path, local_task(project), solve_but_break_titleize)
    assert result.reward == 0.0
    assert result.details["fail_to_pass"] == "1/1" and result.details["pass_to_pass"] == "5/6"
    titleize = "test_inflection.py::test_titleize[action web service-Action Web Service]"
    assert json.loads(result.details["tests"]) == {
        swe_project.FAIL_TO_PASS[0]: "PASSED",
        titleize: "FAILED",
    }


async def test_the_tests_are_the_baselines_whatever_the_session_did_to_them(
    project: SweProject, tmp_path: Path
) -> None:
    # Without restoring the test file first the test patch still applies (it touches another
    # hunk), and the gamed assertion would pass the FAIL_TO_PASS test.
    result = await score_session(tmp_path, local_task(project), game_the_test)
    assert result.reward == 0.0
    assert json.loads(result.details["tests"]) == {swe_project.FAIL_TO_PASS[0]: "FAILED"}


async def test_a_test_patch_that_does_not_apply_gives_no_reward(
    project: SweProject, tmp_path: Path
) -> None:
    patch = project.instance["test_patch"].replace("street_address", "avenue_address")
    task = swe_task(
        project,
        test_patch=patch,
        test_command=f"{sys.executable} -m pytest -rA -p no:cacheprovider",
    )
    result = await score_session(tmp_path, task, solve)
    assert result.reward is None
    assert result.error is not None and result.error.startswith("test patch does not apply:")


async def test_a_test_command_the_machine_lacks_gives_no_reward(
    project: SweProject, tmp_path: Path
) -> None:
    result = await score_session(
        tmp_path, swe_task(project, test_command="no-such-pytest -rA"), solve
    )
    assert result.reward is None
    assert result.error == "the test command could not run: no-such-pytest -rA"
