"""The simple evaluators and the registry's guarantees: a result for every trajectory."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from rollstream.consumers.score.evaluators import (
    EVALUATORS,
    UNKNOWN,
    EvalContext,
    EvalResult,
    evaluate,
    spec_for,
)
from rollstream.schemas import EvaluatorSpec, SessionStatus, Trajectory
from tests.schemas.samples import TASK, TRAJECTORY

FUNCTIONS = "tests.consumers.score.functions"


def _trajectory(
    final_text: str = "ok", status: SessionStatus = SessionStatus.COMPLETED
) -> Trajectory:
    return TRAJECTORY.model_copy(update={"final_text": final_text, "session_status": status})


async def _eval(
    kind: str, config: dict[str, str], trajectory: Trajectory | None = None, timeout_s: float = 10
) -> EvalResult:
    spec = EvaluatorSpec(kind=kind, config=config)
    return await evaluate(trajectory or _trajectory(), spec, timeout_s=timeout_s)


@pytest.mark.parametrize(
    ("final_text", "config", "reward"),
    [
        ("42", {"expected": "42"}, 1.0),
        ("  42\n", {"expected": "42\n"}, 1.0),  # both sides stripped
        ("42", {"expected": "43"}, 0.0),
        ("Paris", {"expected": "paris"}, 0.0),
        ("Paris", {"expected": "paris", "ignore_case": "true"}, 1.0),
        ("Paris", {"expected": "paris", "ignore_case": "no"}, 0.0),
    ],
)
async def test_exact_match(final_text: str, config: dict[str, str], reward: float) -> None:
    result = await _eval("exact_match", config, _trajectory(final_text))
    assert result.reward == reward and result.error is None


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({}, "no 'expected'"),
        ({"expected": "x", "ignore_case": "maybe"}, "not a yes/no value"),
    ],
)
async def test_exact_match_config_errors(config: dict[str, str], error: str) -> None:
    result = await _eval("exact_match", config)
    assert result.reward is None and result.error is not None and error in result.error


@pytest.mark.parametrize(
    ("final_text", "config", "reward", "match"),
    [
        ("The answer is 42.", {"pattern": r"\b42\b"}, 1.0, "42"),
        ("The answer is 421.", {"pattern": r"\b42\b"}, 0.0, None),
        ("ANSWER: yes", {"pattern": "answer: (yes|no)"}, 0.0, None),
        ("ANSWER: yes", {"pattern": "answer: (yes|no)", "flags": "i"}, 1.0, "ANSWER: yes"),
        ("a\nb", {"pattern": "a.b"}, 0.0, None),
        ("a\nb", {"pattern": "a.b", "flags": "s"}, 1.0, "a\nb"),
        ("x\nend", {"pattern": "^end$", "flags": "im"}, 1.0, "end"),
    ],
)
async def test_regex(
    final_text: str, config: dict[str, str], reward: float, match: str | None
) -> None:
    result = await _eval("regex", config, _trajectory(final_text))
    assert result.reward == reward and result.error is None
    assert result.details.get("match") == match


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"pattern": "(unclosed"}, "invalid pattern"),
        ({"pattern": "x", "flags": "q"}, "unknown regex flag 'q'"),
        ({}, "no 'pattern'"),
    ],
)
async def test_regex_errors(config: dict[str, str], error: str) -> None:
    result = await _eval("regex", config)
    assert result.reward is None and result.error is not None and error in result.error


@pytest.mark.parametrize(
    ("status", "reward"),
    [
        (SessionStatus.COMPLETED, 1.0),
        (SessionStatus.FAILED, 0.0),
        (SessionStatus.TIMEOUT, 0.0),
        (SessionStatus.CANCELLED, 0.0),
        (SessionStatus.UNKNOWN, 0.0),
    ],
)
async def test_session_completed(status: SessionStatus, reward: float) -> None:
    result = await _eval("session_completed", {}, _trajectory(status=status))
    assert result == EvalResult(reward, {"session_status": status.value})


async def test_python_function_returning_a_number() -> None:
    result = await _eval("python", {"function": f"{FUNCTIONS}:length_reward"}, _trajectory("abcd"))
    assert result == EvalResult(0.4)


async def test_python_function_returning_a_dict_gives_details_as_strings() -> None:
    result = await _eval("python", {"function": f"{FUNCTIONS}:with_details"})
    assert result == EvalResult(0.25, {"task": TASK.task_id, "tokens": "3"})


@pytest.mark.parametrize(
    ("function", "error"),
    [
        ("no_such_module_xyz:f", "cannot import no_such_module_xyz: ModuleNotFoundError"),
        (f"{FUNCTIONS}:missing", "has no missing"),
        (f"{FUNCTIONS}:NOT_CALLABLE", "is not callable"),
        ("no_colon", "not of the form module:function"),
        (f"{FUNCTIONS}:explodes", "raised ValueError: the grader broke"),
        (f"{FUNCTIONS}:no_reward_key", "has no 'reward'"),
        (f"{FUNCTIONS}:not_a_number", "not a number or a dict"),
        (f"{FUNCTIONS}:not_finite", "is not finite"),
    ],
)
async def test_python_errors_become_results_without_reward(function: str, error: str) -> None:
    result = await _eval("python", {"function": function})
    assert result.reward is None and result.error is not None and error in result.error


async def test_unknown_kind() -> None:
    result = await _eval("llm_judge", {})
    assert result == EvalResult(None, {"kind": "llm_judge"}, UNKNOWN)


async def test_a_raising_evaluator_gives_a_result_with_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(t: Trajectory, c: Mapping[str, str], ctx: EvalContext) -> EvalResult:
        raise KeyError("surprise")

    monkeypatch.setitem(EVALUATORS, "broken", broken)
    result = await _eval("broken", {})
    assert result.reward is None and result.error == "KeyError: 'surprise'"


async def test_a_hanging_evaluator_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    async def hangs(t: Trajectory, c: Mapping[str, str], ctx: EvalContext) -> EvalResult:
        seen.append(ctx.remaining())
        await asyncio.sleep(30)
        return EvalResult(1.0)

    monkeypatch.setitem(EVALUATORS, "hangs", hangs)
    loop = asyncio.get_running_loop()
    began = loop.time()
    result = await _eval("hangs", {}, timeout_s=0.2)
    assert result.reward is None and result.error is not None and "timeout" in result.error
    assert loop.time() - began < 2
    assert 0 < seen[0] <= 0.2  # the evaluator was told its deadline


def test_spec_for_uses_the_tasks_evaluator_else_the_default() -> None:
    assert spec_for(TRAJECTORY, "regex") == TASK.evaluator
    no_evaluator = TRAJECTORY.model_copy(
        update={"task": TASK.model_copy(update={"evaluator": None})}
    )
    assert spec_for(no_evaluator, "regex") == EvaluatorSpec(kind="regex")
    no_task = TRAJECTORY.model_copy(update={"task": None})
    assert spec_for(no_task, "session_completed") == EvaluatorSpec(kind="session_completed")
