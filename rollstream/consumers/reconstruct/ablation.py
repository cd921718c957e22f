"""Ablation: several strategies over the same sessions, side by side.

:func:`ablate` is pure: it takes each session's CallRecords, runs every strategy on them (the
strategies are pure functions), checks every result with the faithfulness checker and sums
per strategy. The writers turn the report into Markdown, JSON and a PNG chart.

Definitions (per strategy, over the sessions that have at least one call):

- ``segments per session``: segments emitted / sessions;
- ``total tokens``: the length of every segment summed (what a trainer would read);
- ``trainable tokens``: tokens with loss mask 1;
- ``merge rate``: merges / merge opportunities, where a session's opportunities are
  ``calls_used - 1`` (each placed call after its first could extend an existing segment or
  start a new one, a break). 1.0 means every such call extended a segment; ``per_call`` has 0;
  it is undefined (None) when no session placed two calls (``retokenize`` places one);
- ``violations``: what :func:`check_segments` reports against the session's calls, with
  whether the strategy relaxes the invariant (then violations are expected departures);
- ``break reasons``: the strategies' break reasons summed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.errors import ConfigurationError
from rollstream.models.family import Family
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import CallRecord


@dataclass
class StrategyAblation:
    """One strategy's sums over the sessions."""

    strategy: str
    sessions: int = 0
    segments: int = 0
    empty_sessions: int = 0  # sessions the strategy gave no segment
    calls: int = 0
    calls_used: int = 0
    failed_calls: int = 0
    duplicate_calls: int = 0
    calls_without_tokens: int = 0
    merges: int = 0
    merge_opportunities: int = 0
    breaks: int = 0
    break_reasons: Counter[str] = field(default_factory=Counter)
    total_tokens: int = 0
    trainable_tokens: int = 0
    violations: int = 0
    violation_kinds: Counter[str] = field(default_factory=Counter)
    sessions_with_violations: int = 0
    invariant_relaxed: bool = False
    errors: int = 0  # sessions on which the strategy raised
    first_error: str | None = None

    @property
    def segments_per_session(self) -> float:
        """Mean segments per session (0.0 without sessions)."""
        return self.segments / self.sessions if self.sessions else 0.0

    @property
    def merge_rate(self) -> float | None:
        """Merges over merge opportunities (see the module docstring); None without any."""
        return self.merges / self.merge_opportunities if self.merge_opportunities else None

    def to_json(self) -> dict[str, Any]:
        """Plain data, derived figures included."""
        return {
            "strategy": self.strategy,
            "sessions": self.sessions,
            "segments": self.segments,
            "segments_per_session": round(self.segments_per_session, 4),
            "empty_sessions": self.empty_sessions,
            "calls": self.calls,
            "calls_used": self.calls_used,
            "failed_calls": self.failed_calls,
            "duplicate_calls": self.duplicate_calls,
            "calls_without_tokens": self.calls_without_tokens,
            "merges": self.merges,
            "merge_opportunities": self.merge_opportunities,
            "merge_rate": None if self.merge_rate is None else round(self.merge_rate, 4),
            "breaks": self.breaks,
            "break_reasons": dict(sorted(self.break_reasons.items())),
            "total_tokens": self.total_tokens,
            "trainable_tokens": self.trainable_tokens,
            "violations": self.violations,
            "violation_kinds": dict(sorted(self.violation_kinds.items())),
            "sessions_with_violations": self.sessions_with_violations,
            "invariant_relaxed": self.invariant_relaxed,
            "errors": self.errors,
            "first_error": self.first_error,
        }


@dataclass
class AblationReport:
    """Every strategy's sums over the same sessions."""

    sessions: int
    calls: int
    strategies: list[StrategyAblation]

    def to_json(self) -> dict[str, Any]:
        """Plain data for ablation.json."""
        return {
            "sessions": self.sessions,
            "calls": self.calls,
            "definitions": DEFINITIONS,
            "strategies": [s.to_json() for s in self.strategies],
        }


DEFINITIONS = {
    "segments_per_session": "segments emitted / sessions with calls",
    "total_tokens": "segment lengths summed",
    "trainable_tokens": "tokens with loss mask 1",
    "merge_rate": "merges / sum over sessions of (calls_used - 1); null when that sum is 0",
    "violations": "faithfulness checker findings; expected when invariant_relaxed",
    "break_reasons": "the strategies' break reasons summed over sessions",
}


def ablate(
    calls_by_session: Mapping[str, Sequence[CallRecord]],
    strategies: Sequence[str],
    tokenizer: Family | ChatTokenizer | None = None,
) -> AblationReport:
    """Run ``strategies`` (names or import paths) over every session that has calls.

    Every strategy gets the same context (``tokenizer``; ``calls_reported`` 0, as only the
    calls are known here). A strategy raising on a session is counted in ``errors`` and the
    ablation goes on, except for ConfigurationError (e.g. ``retokenize`` without a tokenizer),
    which is raised.
    """
    functions = [(name, get_strategy(name)) for name in strategies]
    results = [StrategyAblation(name) for name in strategies]
    context = StrategyContext(tokenizer)
    sessions = calls = 0
    for records in calls_by_session.values():
        if not records:
            continue
        resolved = resolve_calls(records)
        by_id = {c.call_id: c for c in resolved}
        sessions += 1
        calls += len(resolved)
        for (_, strategy), out in zip(functions, results, strict=True):
            out.sessions += 1
            try:
                segments, stats = strategy(resolved, context)
            except ConfigurationError:
                raise
            except Exception as exc:  # one strategy bug must not hide the other figures
                out.errors += 1
                out.first_error = out.first_error or f"{type(exc).__name__}: {exc}"
                continue
            found = check_segments(segments, by_id)
            out.segments += len(segments)
            out.empty_sessions += not segments
            out.calls += stats.calls
            out.calls_used += stats.calls_used
            out.failed_calls += stats.failed_calls
            out.duplicate_calls += stats.duplicate_calls
            out.calls_without_tokens += stats.calls_without_tokens
            out.merges += stats.merges
            out.merge_opportunities += max(stats.calls_used - 1, 0)
            out.breaks += stats.breaks
            out.break_reasons.update(stats.break_reasons)
            out.total_tokens += sum(len(s.input_ids) for s in segments)
            out.trainable_tokens += sum(s.trainable_tokens for s in segments)
            out.violations += len(found)
            out.violation_kinds.update(v.kind for v in found)
            out.sessions_with_violations += bool(found)
            out.invariant_relaxed = out.invariant_relaxed or stats.invariant_relaxed
    return AblationReport(sessions, calls, results)


# Writers ----------------------------------------------------------------------------------


def to_markdown(report: AblationReport) -> str:
    """The report as a Markdown table with a line of definitions under it."""
    lines = [
        f"Ablation over {report.sessions} sessions ({report.calls} calls).",
        "",
        "| strategy | sessions | segments/session | total tokens | trainable tokens "
        "| merge rate | violations | invariant | break reasons |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in report.strategies:
        rate = "n/a" if s.merge_rate is None else f"{s.merge_rate:.1%}"
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(s.break_reasons.items())) or "none"
        invariant = "relaxed" if s.invariant_relaxed else "kept"
        if s.empty_sessions:
            reasons += f"; no segment in {s.empty_sessions} session(s)"
        if s.errors:
            reasons += f"; {s.errors} sessions failed ({s.first_error})"
        lines.append(
            f"| {s.strategy} | {s.sessions} | {s.segments_per_session:.2f} | {s.total_tokens:,} "
            f"| {s.trainable_tokens:,} | {rate} | {s.violations:,} | {invariant} | {reasons} |"
        )
    lines += [
        "",
        "Merge rate: merges / Σ(calls used - 1) per session, the share of placed calls after "
        "each session's first that extended a segment instead of starting one. Violations: the "
        "faithfulness checker's findings; under a strategy that relaxes the invariant they are "
        "expected departures, not bugs.",
        "",
    ]
    return "\n".join(lines)


def write_json(report: AblationReport, path: Path) -> None:
    """ablation.json."""
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n")


def write_png(report: AblationReport, path: Path) -> None:
    """A bar chart per figure: segments per session, trainable tokens, violations."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    names = [s.strategy for s in report.strategies]
    colors = ["tab:orange" if s.invariant_relaxed else "tab:blue" for s in report.strategies]
    panels: list[tuple[str, list[float], str]] = [
        ("segments per session", [s.segments_per_session for s in report.strategies], "{:.2f}"),
        ("trainable tokens", [float(s.trainable_tokens) for s in report.strategies], "{:,.0f}"),
        ("invariant violations", [float(s.violations) for s in report.strategies], "{:,.0f}"),
    ]
    figure = Figure(figsize=(4.2 * len(panels), 4.4), layout="constrained")
    FigureCanvasAgg(figure)  # Agg, without pyplot's global state
    axes = figure.subplots(1, len(panels))
    for ax, (title, values, fmt) in zip(axes, panels, strict=True):
        bars = ax.bar(names, values, color=colors)
        ax.bar_label(bars, fmt=fmt, fontsize=8, padding=2)
        ax.set_title(title)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.margins(y=0.15)
    figure.suptitle(f"Reconstruction strategies over {report.sessions} sessions")
    figure.legend(
        handles=[
            Patch(color="tab:blue", label="keeps the invariant"),
            Patch(color="tab:orange", label="relaxes the invariant"),
        ],
        loc="outside lower center",
        ncols=2,
        fontsize=8,
    )
    figure.savefig(path, format="png", dpi=110)


def write_all(report: AblationReport, out: Path) -> dict[str, Path]:
    """ablation.md, ablation.json and ablation.png in ``out`` (created); their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "ablation.md",
        "json": out / "ablation.json",
        "png": out / "ablation.png",
    }
    paths["markdown"].write_text(to_markdown(report))
    write_json(report, paths["json"])
    write_png(report, paths["png"])
    return paths
