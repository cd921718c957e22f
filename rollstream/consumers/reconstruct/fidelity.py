"""How faithfully one session's calls train: threads, segments, breaks, violations, serve gap.

One row per (family, harness, context mode). Threads are counted from the recorded Chat
requests, independently of the mode: a call continues a thread when its messages are an
earlier call's messages, that call's answer, and more. ``prefix_merge`` is the strict strategy
(its segments keep the faithfulness invariant); in exact mode each thread should be one segment.
The serve gap measures what a user accepts with exact mode: for each call sent as tokens, how
many tokens of its prompt come after the first place where the family's own full render of the
same conversation differs (0: the server would have rendered exactly the same prompt).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.models.family import Family
from rollstream.models.threads import appended_messages
from rollstream.schemas import CallRecord, ContextMode
from rollstream.schemas.calls import SessionRequests


def count_threads(records: Sequence[CallRecord]) -> int:
    """Conversation threads among a session's calls, from their Chat requests and answers."""
    requests = SessionRequests(list(records))
    seen: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
    threads = 0
    for record in records:
        upstream = requests.upstream(record.call_id)
        if upstream is None:  # refused before it was sent: no conversation of its own
            continue
        messages = upstream["messages"]
        if not any(appended_messages(m, a, messages) is not None for m, a in seen):
            threads += 1
        response = record.decoded_response()
        if response and response.get("choices"):  # a failed call has no answer to continue
            seen.append((messages, response["choices"][0]["message"]))
    return threads


@dataclass
class FidelityRow:
    """One session's figures (see the module docstring)."""

    family: str
    harness: str
    mode: str
    calls: int = 0
    threads: int = 0
    segments: int = 0
    breaks: Counter[str] = field(default_factory=Counter)
    violations: int = 0
    trainable_tokens: int = 0
    exact_calls: int = 0
    gap_calls: int = 0  # exact calls whose prompt differs from the full render
    gap_tokens: int = 0  # summed over exact calls
    parse_failures: int = 0

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        out = asdict(self)
        out["breaks"] = dict(self.breaks)
        return out


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def fidelity_row(
    family_name: str,
    harness: str,
    mode: str,
    records: Sequence[CallRecord],
    family: Family | None = None,
) -> FidelityRow:
    """The figures of one session's records (sorted by seq); the gap needs the ``family``."""
    row = FidelityRow(family_name, harness, mode, calls=len(records))
    row.threads = count_threads(records)
    calls = resolve_calls(records)
    rebuilt = get_strategy("prefix_merge")(calls, StrategyContext(calls_reported=len(records)))
    row.segments = len(rebuilt.segments)
    row.breaks = Counter(rebuilt.stats.break_reasons)
    row.violations = len(check_segments(rebuilt.segments, {c.call_id: c for c in calls}))
    row.trainable_tokens = sum(s.trainable_tokens for s in rebuilt.segments)
    requests = SessionRequests(list(records))
    for call in calls:
        context = call.record.context
        if context is not None and "not parsed" in context.note:
            row.parse_failures += 1
        if context is None or context.mode is not ContextMode.EXACT or call.prompt is None:
            continue
        row.exact_calls += 1
        if family is None:
            continue
        upstream = requests.upstream(call.call_id)
        full = family.render_ids(upstream["messages"], upstream.get("tools"), True)
        prompt = call.prompt.to_list()
        gap = max(len(prompt), len(full)) - _common_prefix(prompt, full)
        row.gap_calls += gap > 0
        row.gap_tokens += gap
    return row
