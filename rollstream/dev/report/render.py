"""The report page: one self-contained HTML document (inline CSS, no scripts, fonts or images).

Summary numbers and a legend at the top, a table of groups, then each shown trajectory with its
facts and its segments' tokens coloured by loss mask. Pure: records and a tokenizer in, a string
out.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from rollstream.dev.report.facts import (
    GroupFacts,
    Reportable,
    RunSummary,
    TrajectoryFacts,
    facts_of,
    groups_of,
    summarize,
    trajectory_of,
)
from rollstream.dev.report.tokens import TokenTexts, completion_starts, mask_of, segment_tokens_html
from rollstream.models.tokenizer import ChatTokenizer

#: Backgrounds of sampled (loss mask 1) and other (mask 0) tokens, and the token box's border;
#: nothing else on the page uses these colours, so a screenshot can be checked by pixel.
MASK1_COLOR = "#8fdc9a"
MASK0_COLOR = "#dde3ec"
TOKEN_BOX_COLOR = "#6b4fbb"
CALL_COLOR = "#d9480f"

_CSS = f"""
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #1d1d1f; }}
h1 {{ font-size: 22px; margin: 0 0 4px; }}
h2 {{ font-size: 18px; margin: 24px 0 8px; border-bottom: 1px solid #ccc; }}
h3 {{ font-size: 15px; margin: 16px 0 4px; }}
.notes {{ color: #555; margin: 0 0 12px; }}
dl {{ display: flex; flex-wrap: wrap; gap: 2px 20px; margin: 4px 0; }}
dl div {{ display: flex; gap: 6px; }} dt {{ color: #555; }} dd {{ margin: 0; }}
.summary dl {{ font-size: 15px; margin: 8px 0 12px; }}
h3 .headline {{ font-weight: normal; font-size: 14px; margin-left: 12px; }}
.legend .key {{ display: inline-block; padding: 0 6px; margin-right: 12px; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
th, td {{ border: 1px solid #bbb; padding: 2px 8px; text-align: left; }}
td.num {{ text-align: right; }}
.error {{ color: #b00020; }}
.segment-head {{ color: #444; margin: 8px 0 2px; font-size: 13px; }}
.tokens {{ font: 13px/1.7 ui-monospace, "DejaVu Sans Mono", monospace; white-space: break-spaces;
  overflow-wrap: anywhere; border: 2px solid {TOKEN_BOX_COLOR}; padding: 6px; }}
.t.m1, .key.m1 {{ background: {MASK1_COLOR}; }}
.t.m0, .key.m0 {{ background: {MASK0_COLOR}; }}
.t.sp, .key.sp {{ color: #7b1fa2; font-weight: bold; }}
.t.unk {{ color: #b00020; }}
.call {{ background: {CALL_COLOR}; color: #fff; font: bold 11px system-ui, sans-serif;
  padding: 1px 4px; margin: 0 2px 0 6px; border-left: 3px solid #000; }}
.omitted {{ display: block; color: #666; font-style: italic; margin: 4px 0; }}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _reward(value: float | None) -> str:
    return "\u2013" if value is None else f"{value:.4g}"


def _versions(versions: Sequence[int]) -> str:
    return ", ".join(str(v) for v in versions) or "\u2013"


def _dl(items: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are HTML already."""
    return "<dl>" + "".join(f"<div><dt>{_e(k)}</dt><dd>{v}</dd></div>" for k, v in items) + "</dl>"


def _reward_html(facts: TrajectoryFacts) -> str:
    if facts.reward is not None:
        return f'<span class="reward">{_reward(facts.reward)}</span>'
    if facts.scored:
        return f'<span class="error">evaluation failed: {_e(facts.error or "no reward")}</span>'
    return "not scored"


def _headline(facts: TrajectoryFacts) -> str:
    if facts.reward is not None:
        return f'<span class="headline">reward {_reward(facts.reward)}</span>'
    return '<span class="headline error">evaluation failed</span>' if facts.scored else ""


def _summary_html(summary: RunSummary, shown: int) -> str:
    trainable = summary.trainable_tokens
    share = f" ({trainable / summary.tokens:.1%})" if summary.tokens else ""
    items = [
        ("trajectories", f"{summary.trajectories:,} ({shown:,} shown below)"),
        ("groups", f"{summary.groups:,}"),
        ("scored", f"{summary.scored:,} ({summary.evaluation_errors:,} evaluation errors)"),
        ("mean reward", f"{_reward(summary.mean_reward)} over {summary.rewarded:,}"),
        ("segments", f"{summary.segments:,}"),
        ("tokens", f"{summary.tokens:,}"),
        ("trainable tokens", f"{trainable:,}{share}"),
        ("strategies", _e(", ".join(summary.strategies) or "\u2013")),
        ("harnesses", _e(", ".join(summary.harnesses) or "\u2013")),
        ("policy versions", _versions(summary.policy_versions)),
    ]
    return f'<section class="summary">{_dl(items)}</section>'


def _legend_html() -> str:
    return (
        '<section class="legend"><span class="key m1">sampled by the policy (loss mask 1)</span>'
        '<span class="key m0">prompt, tool results, template (loss mask 0)</span>'
        '<span class="key m0 sp">special token</span>'
        '<span class="call">call id</span> where a call\'s completion starts. '
        "Hover a token for its id and logprob.</section>"
    )


def _group_rows(groups: Sequence[GroupFacts], anchors: dict[str, str]) -> str:
    rows = []
    for group in groups:
        anchor = anchors.get(group.group_id)
        name = _e(group.group_id)
        link = f'<a href="#{anchor}">{name}</a>' if anchor else name
        samples = str(len(group.members))
        if group.expected_samples is not None:
            samples += f" / {group.expected_samples}"
        rewards = ", ".join(
            _reward(m.reward)
            if m.reward is not None
            else f'<span class="error" title="{_e(m.error or "")}">error</span>'
            if m.scored
            else "\u2013"
            for m in group.members
        )
        rows.append(
            f'<tr class="group-row" data-group-id="{name}"><td>{link}</td>'
            f"<td>{_e(', '.join(group.task_ids))}</td><td class=num>{samples}</td>"
            f'<td class="rewards">{rewards}</td>'
            f'<td class="num mean">{_reward(group.mean_reward)}</td>'
            f"<td class=num>{group.trainable_tokens:,}</td></tr>"
        )
    return (
        '<section class="groups"><h2>Groups</h2><table><thead><tr><th>group</th><th>task</th>'
        "<th>samples</th><th>rewards (by sample index)</th><th>mean reward</th>"
        f"<th>trainable tokens</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _calls(call_ids: Sequence[str], show: int = 6) -> str:
    """The segment's calls for its header; a long list keeps its first and last few."""
    if len(call_ids) <= show:
        return f"calls {_e(', '.join(call_ids) or '\u2013')}"
    names = [*call_ids[: show // 2], "\u2026", *call_ids[-(show // 2) :]]
    return f"{len(call_ids):,} calls {_e(', '.join(names))}"


def _trajectory_html(record: Reportable, anchor: str, texts: TokenTexts, cap: int) -> str:
    trajectory = trajectory_of(record)
    facts = facts_of(record)
    items = [
        ("session", _e(facts.session_id)),
        ("group", _e(facts.group_id)),
        ("task", _e(facts.task_id)),
        ("sample index", str(facts.sample_index)),
        ("harness", _e(facts.harness or "\u2013")),
        ("strategy", _e(facts.strategy)),
        ("status", f"{_e(facts.status)} (session {_e(facts.session_status)})"),
        ("reward", _reward_html(facts)),
        ("evaluator", _e(facts.evaluator or "\u2013")),
        ("segments", str(facts.segments)),
        ("tokens / trainable", f"{facts.tokens:,} / {facts.trainable_tokens:,}"),
        ("policy versions", _versions(facts.policy_versions)),
    ]
    segments = []
    for index, segment in enumerate(trajectory.segments):
        n = len(segment.input_ids)
        runs = len(completion_starts(mask_of(segment)))
        calls = len(segment.call_ids)
        mismatch = f" \u00b7 {runs} completions for {calls} calls" if runs != calls else ""
        parent = f" \u00b7 parent {segment.parent}" if segment.parent is not None else ""
        segments.append(
            f'<div class="segment" data-segment="{index}"><div class="segment-head">segment '
            f"{index} \u00b7 {n:,} tokens \u00b7 {segment.trainable_tokens:,} trainable \u00b7 "
            f"{_calls(segment.call_ids)}{parent}{mismatch}</div>"
            f'<div class="tokens">{segment_tokens_html(segment, texts, cap)}</div></div>'
        )
    body = "".join(segments) or "<p>no segments</p>"
    return (
        f'<article class="trajectory" id="{anchor}" '
        f'data-trajectory-id="{_e(facts.trajectory_id)}"><h3>{_e(facts.trajectory_id)}'
        f"{_headline(facts)}</h3>"
        f"{_dl(items)}{body}</article>"
    )


def render_report(
    records: Sequence[Reportable],
    tokenizer: ChatTokenizer,
    *,
    tokens_per_segment: int = 4000,
    more: Sequence[TrajectoryFacts] = (),
    notes: Sequence[str] = (),
    title: str = "rollstream report",
) -> str:
    """The page for ``records`` (shown token by token) and ``more`` (counted, not shown).

    ``notes`` are lines under the title (where the records came from, when). Trajectories are
    shown by group, in the order groups first appear, each group by sample index.
    """
    shown = [facts_of(r) for r in records]
    everything = [*shown, *more]
    by_group: dict[str, list[tuple[TrajectoryFacts, Reportable]]] = {}
    for facts, record in zip(shown, records, strict=True):
        by_group.setdefault(facts.group_id, []).append((facts, record))
    anchors = {group_id: f"group-{k}" for k, group_id in enumerate(by_group)}
    texts = TokenTexts(tokenizer)
    sections = []
    number = 0
    for group_id, members in by_group.items():
        members.sort(key=lambda pair: (pair[0].sample_index, pair[0].trajectory_id))
        articles = []
        for _, record in members:
            articles.append(_trajectory_html(record, f"traj-{number}", texts, tokens_per_segment))
            number += 1
        sections.append(
            f'<section class="group" id="{anchors[group_id]}"><h2>group {_e(group_id)}</h2>'
            f"{''.join(articles)}</section>"
        )
    notes_html = "".join(f'<p class="notes">{_e(n)}</p>' for n in notes)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>{notes_html}{_summary_html(summarize(everything), len(shown))}"
        f"{_legend_html()}{_group_rows(groups_of(everything), anchors)}"
        f'<div class="trajectories">{"".join(sections)}</div></body></html>\n'
    )
