"""Ablation over generated sessions: the figures each strategy must give, and the writers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollstream.consumers.reconstruct.ablation import (
    AblationReport,
    StrategyAblation,
    ablate,
    to_markdown,
    write_all,
)
from rollstream.consumers.reconstruct.strategies import StrategyContext, StrategyResult
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.errors import ConfigurationError
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import CallRecord
from tests.consumers.reconstruct.sessions import build_session
from tests.consumers.reconstruct.test_retokenize import record

SHAPE = SyntheticShape(turns=4, system_tokens=40, tool_result_tokens=10, completion_tokens=6)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def synthetic(n: int = 3) -> dict[str, list[CallRecord]]:
    return {f"s{i}": synthetic_session(f"s{i}", SHAPE, seed=i).calls for i in range(n)}


def by_name(report: AblationReport) -> dict[str, StrategyAblation]:
    return {s.strategy: s for s in report.strategies}


def test_synthetic_sessions(tokenizer: ChatTokenizer) -> None:
    sessions = synthetic(3)
    sessions["no-calls"] = []  # a session without calls is not counted
    report = ablate(
        sessions, ["per_call", "prefix_merge", "prompt_prefix_merge", "tree"], tokenizer
    )
    assert (report.sessions, report.calls) == (3, 12)
    got = by_name(report)
    completions = 3 * SHAPE.turns * SHAPE.completion_tokens
    last_prompt = SHAPE.system_tokens + 3 * (SHAPE.completion_tokens + SHAPE.tool_result_tokens)
    whole = last_prompt + SHAPE.completion_tokens  # the one segment of a merged session
    for name in ("prefix_merge", "prompt_prefix_merge", "tree"):
        s = got[name]
        assert s.sessions == 3 and s.segments == 3 and s.segments_per_session == 1.0, name
        assert s.merges == 9 and s.merge_opportunities == 9 and s.merge_rate == 1.0, name
        assert s.total_tokens == 3 * whole and s.trainable_tokens == completions, name
        assert s.breaks == 0 and not s.break_reasons, name
    per_call = got["per_call"]
    assert per_call.segments_per_session == SHAPE.turns and per_call.merge_rate == 0.0
    assert per_call.trainable_tokens == completions
    assert per_call.total_tokens > got["prefix_merge"].total_tokens
    for name in ("per_call", "prefix_merge", "tree"):
        assert got[name].violations == 0 and not got[name].invariant_relaxed, name
    assert got["prompt_prefix_merge"].invariant_relaxed  # relaxed, though faithful here
    assert got["prompt_prefix_merge"].violations == 0
    assert all(s.errors == 0 and s.calls_used == 12 for s in report.strategies)


def test_break_reasons_and_left_out_calls_are_summed() -> None:
    drift = build_session(["turn", "drift", "turn"], seed=1)
    messy = build_session(["failed", "retry_identical", "no_tokens", "turn"], seed=5)
    report = ablate(
        {"drift": drift.records, "messy": messy.records}, ["prefix_merge", "tree", "per_call"]
    )
    got = by_name(report)
    merge = got["prefix_merge"]
    assert merge.break_reasons["drift"] >= 1 and merge.segments >= 3
    assert merge.breaks == sum(merge.break_reasons.values())
    assert merge.merges + merge.breaks == merge.merge_opportunities
    assert got["tree"].merges + got["tree"].breaks == got["tree"].merge_opportunities
    assert got["per_call"].segments == got["per_call"].calls_used
    for s in report.strategies:
        assert s.violations == 0, s.strategy
        assert (s.failed_calls, s.duplicate_calls, s.calls_without_tokens) == (1, 1, 1)
        assert s.calls == s.calls_used + 3


def test_retokenize_relaxes_the_invariant(tokenizer: ChatTokenizer) -> None:
    real = {"r": [record(tokenizer, call_id="c-0", seq=0), record(tokenizer, seq=1)]}
    got = by_name(ablate(real, ["retokenize", "prefix_merge"], tokenizer))
    retok = got["retokenize"]
    assert retok.invariant_relaxed and retok.segments == 1
    assert retok.violations > 0 and retok.violation_kinds["logprob_mismatch"] >= 1
    assert retok.merge_rate is None and retok.merge_opportunities == 0
    assert got["prefix_merge"].violations == 0
    # Synthetic calls keep no conversation to re-render: relaxed, no segment, no error.
    synthetic_only = by_name(ablate(synthetic(1), ["retokenize"], tokenizer))["retokenize"]
    assert synthetic_only.invariant_relaxed and synthetic_only.empty_sessions == 1
    assert synthetic_only.errors == 0
    with pytest.raises(ConfigurationError, match="tokenizer"):
        ablate(real, ["retokenize"])


def broken(calls: object, context: StrategyContext) -> StrategyResult:
    raise RuntimeError("boom")


def test_a_failing_strategy_is_counted_and_the_rest_goes_on() -> None:
    path = f"{__name__}:broken"
    report = ablate(synthetic(2), [path, "prefix_merge"])
    got = by_name(report)
    assert got[path].errors == 2 and got[path].first_error == "RuntimeError: boom"
    assert got["prefix_merge"].segments == 2
    assert "2 sessions failed (RuntimeError: boom)" in to_markdown(report)
    with pytest.raises(ConfigurationError, match="unknown strategy"):
        ablate(synthetic(1), ["nope"])


def test_writers(tmp_path: Path, tokenizer: ChatTokenizer) -> None:
    report = ablate(synthetic(2), ["per_call", "prefix_merge", "retokenize"], tokenizer)
    paths = write_all(report, tmp_path / "out")
    markdown = paths["markdown"].read_text()
    assert markdown == to_markdown(report)
    assert "| prefix_merge | 2 | 1.00 |" in markdown
    assert "| retokenize | 2 | 0.00 |" in markdown and "| n/a | 0 | relaxed |" in markdown
    data = json.loads(paths["json"].read_text())
    assert data["sessions"] == 2 and "merge_rate" in data["definitions"]
    rows = {row["strategy"]: row for row in data["strategies"]}
    assert rows["per_call"]["segments_per_session"] == SHAPE.turns
    assert rows["prefix_merge"]["merge_rate"] == 1.0 and rows["retokenize"]["merge_rate"] is None
    assert rows["retokenize"]["invariant_relaxed"] is True
    assert paths["png"].read_bytes().startswith(PNG_SIGNATURE)
