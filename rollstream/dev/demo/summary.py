"""The demo's closing table: sessions, calls, tokens, rewards per group, training."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rollstream.dev.demo.facts import facts_of, groups_of, summarize
from rollstream.dev.examples.grpo_trainer import StepReport
from rollstream.schemas import CallRecord, Scored


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def summary_table(
    scored: Sequence[Scored],
    calls: Sequence[CallRecord],
    steps: Sequence[StepReport],
    after: Sequence[CallRecord],
) -> str:
    """Plain text, fixed-width: what a newcomer reads at the end of ``make demo``."""
    facts = [facts_of(s) for s in scored]
    totals = summarize(facts)
    sessions = Counter(s.trajectory.session_status.value for s in scored)
    lines = [
        f"sessions {len(scored)} ({', '.join(f'{n} {k}' for k, n in sorted(sessions.items()))})"
        f"   calls {len(calls)}   tokens {totals.tokens:,}   trainable {totals.trainable_tokens:,}"
        f"   mean reward {_reward(totals.mean_reward)}",
        "",
        f"{'group':<28} {'rewards':<22} {'mean':>6} {'trainable':>10} {'segments':>9}",
    ]
    for group in groups_of(facts):
        rewards = " ".join(_reward(f.reward) for f in group.members)
        lines.append(
            f"{group.group_id:<28} {rewards:<22} {_reward(group.mean_reward):>6} "
            f"{group.trainable_tokens:>10} {sum(f.segments for f in group.members):>9}"
        )
    stats = [s.trajectory.stats for s in scored]
    reasons: Counter[str] = Counter()
    for s in stats:
        reasons.update(s.break_reasons)
    strategy = ", ".join(totals.strategies) or "-"
    per = totals.segments / len(scored) if scored else 0.0
    lines += [
        "",
        f"reconstruction ({strategy}): {per:.2f} segments per trajectory, "
        f"{sum(s.merges for s in stats)} merges, {sum(s.breaks for s in stats)} breaks"
        + (f" ({', '.join(f'{k} {n}' for k, n in reasons.most_common())})" if reasons else "")
        + f", {sum(s.failed_calls for s in stats)} failed calls, "
        f"{sum(s.calls_without_tokens for s in stats)} calls without tokens",
        "",
    ]
    lines += [f"trainer: {step.line()}" for step in steps]
    if after:
        versions = sorted({c.policy_version for c in after})
        lines.append(
            f"after training: a new session's {len(after)} calls stamped with policy "
            f"v{', v'.join(map(str, versions))}"
        )
    return "\n".join(lines)
