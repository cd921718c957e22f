"""The fleet as the console shows it: sessions, call rates, errors, policy versions. Pure.

The feed hands every session record and call record to :class:`Fleet`; the server asks it for a
snapshot once a second and for pages of sessions. Memory is bounded: a session keeps its facts
(never its records), and the oldest ended sessions are forgotten past ``max_sessions``, or
past ``max_calls`` calls held in all (a few long sessions weigh as much as many short), where
running sessions let go of their oldest calls instead. Rates
are bucketed by the second the call ended, so catching up on an old log draws no spike.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollstream.schemas import CallRecord, CallStatus, SessionEnded, SessionStarted

RUNNING = "running"
#: The filters a page of sessions takes, each an exact match on the field of the same name.
SESSION_FILTERS = ("task_id", "group_id", "harness", "status", "policy_version")


@dataclass(slots=True)  # a million of them at scale: slots save a third of their memory
class CallFacts:
    """One call of a session, for the timeline: no tokens, no bodies."""

    call_id: str
    seq: int
    model: str
    agent: str | None
    parent: str | None
    status: str
    started_at: float
    first_token_at: float | None
    ended_at: float | None
    prompt_tokens: int
    completion_tokens: int
    error: str | None

    @classmethod
    def of(cls, call: CallRecord) -> CallFacts:
        """The facts of a call record."""
        timings = call.timings
        prompt = call.prompt
        prompt_tokens = 0 if prompt is None else prompt.shared_len + len(prompt.suffix)
        return cls(
            call_id=call.call_id,
            seq=call.seq,
            model=call.model,
            agent=call.caller.agent if call.caller else None,
            parent=call.caller.parent if call.caller else None,
            status=call.status.value,
            started_at=timings.started_at.timestamp(),
            first_token_at=_ts(timings.first_token_at),
            ended_at=_ts(timings.ended_at),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(call.completion_token_ids or ()),
            error=call.error.type if call.error else None,
        )


def finite(value: float | None) -> float | None:
    """``value``, or None when it is not a finite number (JSON has no NaN or infinity)."""
    return value if value is not None and math.isfinite(value) else None


def _ts(moment: Any) -> float | None:
    return None if moment is None else float(moment.timestamp())


@dataclass(slots=True)
class SessionRow:
    """What the session list shows of one session."""

    session_id: str
    task_id: str = ""
    group_id: str = ""
    sample_index: int = 0
    harness: str = ""
    node_id: str = ""
    status: str = RUNNING
    policy_version: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    trajectory_id: str | None = None
    reward: float | None = None
    #: Its calls' facts, oldest first; the oldest are let go past the fleet's call bound.
    calls: deque[CallFacts] = field(default_factory=deque)
    call_count: int = 0

    def public(self) -> dict[str, Any]:
        """The row as the API sends it."""
        return {
            "session_id": self.session_id,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "sample_index": self.sample_index,
            "harness": self.harness,
            "node_id": self.node_id,
            "status": self.status,
            "policy_version": self.policy_version,
            "calls": self.call_count,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "trajectory_id": self.trajectory_id,
            "reward": self.reward,
        }


def field_of(row: Any, name: str) -> Any:
    """A field of a row, whether a mapping or an object."""
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def matches(row: Any, filters: Mapping[str, str]) -> bool:
    """Whether ``row`` equals every non-empty filter (compared as text)."""
    return all(str(field_of(row, k)) == v for k, v in filters.items() if v != "")


def page_of[R](
    rows: Iterable[R], filters: Mapping[str, str], offset: int, limit: int
) -> tuple[int, list[R]]:
    """The total matching ``filters`` and the ``[offset, offset + limit)`` slice of them."""
    active = {k: v for k, v in filters.items() if v != ""}
    total = 0
    items: list[R] = []
    for row in rows:
        if not active or matches(row, active):
            if offset <= total < offset + limit:
                items.append(row)
            total += 1
    return total, items


class Fleet:
    """Sessions and calls as they arrive; snapshots and pages on demand."""

    def __init__(
        self,
        *,
        max_sessions: int = 200_000,
        max_calls: int = 2_000_000,
        rate_window_s: float = 10.0,
        history_s: int = 300,
    ) -> None:
        self.max_sessions = max_sessions
        self.max_calls = max_calls
        self.held_calls = 0
        #: Calls let go by running sessions past ``max_calls`` (their rows still count them).
        self.calls_forgotten = 0
        self.rate_window_s = rate_window_s
        self.history_s = history_s
        self.sessions: OrderedDict[str, SessionRow] = OrderedDict()
        self.calls = 0
        self.tokens = 0
        self.records = 0
        self.errors: Counter[str] = Counter()
        self.deadletters = 0
        self.forgotten = 0
        # second -> (harness, model) -> [calls, tokens]
        self._buckets: dict[int, dict[tuple[str, str], list[int]]] = defaultdict(dict)
        self._newest_second = 0
        # Counts kept as rows change, so a snapshot or a page's facets walk no session.
        self._counts: dict[str, Counter[Any]] = {
            k: Counter() for k in ("status", "harness", "version", "running_version")
        }
        self._nodes: dict[str, Counter[str]] = defaultdict(Counter)
        self._ended: OrderedDict[str, None] = OrderedDict()  # in the order they ended

    def _count(self, row: SessionRow, sign: int) -> None:
        running = row.status == RUNNING
        self._counts["status"][row.status] += sign
        self._counts["harness"][row.harness] += sign
        self._counts["version"][row.policy_version] += sign
        if running:
            self._counts["running_version"][row.policy_version] += sign
        self._nodes[row.node_id or "?"]["running" if running else "ended"] += sign

    def _row(self, session_id: str) -> SessionRow:
        row = self.sessions.get(session_id)
        if row is None:
            row = self.sessions[session_id] = SessionRow(session_id)
            self._count(row, +1)
            self._forget_beyond_bound(keep=session_id)
        return row

    def _forget_beyond_bound(self, keep: str) -> None:
        """Past ``max_sessions``: the sessions that ended first; running ones when none has."""
        while len(self.sessions) > self.max_sessions:
            ended = (s for s in self._ended if s != keep)
            victim = next(ended, None) or next((s for s in self.sessions if s != keep), None)
            if victim is None:
                return
            self._forget(victim)

    def _forget_calls_beyond_bound(self, row: SessionRow) -> None:
        """Past ``max_calls``: the sessions that ended first; then running ones' oldest calls.

        A running session is never forgotten for its calls. When only running ones are left,
        each lets go of its oldest calls down to an even share of nine tenths of the bound, so
        a session that starts then still gets its timeline, and the sessions are walked once
        in a tenth of the bound's calls, not at every call (while the bound is well above the
        number of sessions, as its default is above ``max_sessions``).
        """
        while self.held_calls > self.max_calls:
            victim = next((s for s in self._ended if s != row.session_id), None)
            if victim is None:
                break
            self._forget(victim)
        if self.held_calls <= self.max_calls:
            return
        share = max(1, self.max_calls * 9 // 10 // len(self.sessions))
        for held in self.sessions.values():
            while len(held.calls) > share:
                held.calls.popleft()
                self.held_calls -= 1
                self.calls_forgotten += 1

    def _forget(self, session_id: str) -> None:
        row = self.sessions.pop(session_id)
        self._ended.pop(session_id, None)
        self._count(row, -1)
        self.held_calls -= len(row.calls)
        self.forgotten += 1

    def started(self, record: SessionStarted) -> None:
        """A session began."""
        self.records += 1
        row = self._row(record.session_id)
        self._count(row, -1)
        row.task_id, row.group_id = record.task_id, record.group_id
        row.sample_index, row.harness = record.sample_index, record.harness
        row.node_id, row.policy_version = record.node_id, record.policy_version
        row.started_at = record.started_at.timestamp()
        self._count(row, +1)

    def ended(self, record: SessionEnded) -> None:
        """A session ended (possibly one this console never saw start)."""
        self.records += 1
        row = self._row(record.session_id)
        self._count(row, -1)
        row.task_id, row.group_id = record.task_id, record.group_id
        row.sample_index, row.harness = record.sample_index, record.harness
        row.status = record.status.value
        row.ended_at = record.ended_at.timestamp()
        self._count(row, +1)
        self._ended[row.session_id] = None

    def call(self, record: CallRecord) -> None:
        """A call ended: counted in the totals, its second's bucket and its session."""
        self.records += 1
        facts = CallFacts.of(record)
        row = self._row(record.session_id)
        row.calls.append(facts)
        row.call_count += 1
        self.held_calls += 1
        self._forget_calls_beyond_bound(row)
        self.calls += 1
        self.tokens += facts.completion_tokens
        if record.status is not CallStatus.OK:
            kind = record.error.type if record.error else record.status.value
            self.errors[kind] += 1
        second = int(facts.ended_at or facts.started_at)
        self._newest_second = max(self._newest_second, second)
        if second > self._newest_second - self.history_s:
            cell = self._buckets[second].setdefault((row.harness, record.model), [0, 0])
            cell[0] += 1
            cell[1] += facts.completion_tokens

    def deadletter(self) -> None:
        """A consumer gave up on a record."""
        self.records += 1
        self.deadletters += 1

    def scored(self, session_id: str, trajectory_id: str, reward: float | None) -> None:
        """A trajectory of the session was scored."""
        row = self.sessions.get(session_id)
        if row is not None:
            row.trajectory_id, row.reward = trajectory_id, finite(reward)

    def reconstructed(self, session_id: str, trajectory_id: str) -> None:
        """A trajectory of the session was built (scored or not yet)."""
        row = self.sessions.get(session_id)
        if row is not None and row.trajectory_id is None:
            row.trajectory_id = trajectory_id

    def _prune(self, now: float) -> None:
        oldest = int(now) - self.history_s
        for second in [s for s in self._buckets if s <= oldest]:
            del self._buckets[second]

    def rates(self, now: float) -> list[dict[str, Any]]:
        """Calls/s and sampled tokens/s by harness and model over the last window."""
        since = now - self.rate_window_s
        sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        for second, cells in self._buckets.items():
            if since <= second < now:
                for key, (calls, tokens) in cells.items():
                    sums[key][0] += calls
                    sums[key][1] += tokens
        return [
            {
                "harness": harness,
                "model": model,
                "calls_per_s": calls / self.rate_window_s,
                "tokens_per_s": tokens / self.rate_window_s,
            }
            for (harness, model), (calls, tokens) in sorted(sums.items())
        ]

    def history(self, now: float) -> dict[str, list[float]]:
        """Calls and tokens per second, every second of the last ``history_s``."""
        end = int(now)
        seconds = list(range(end - self.history_s + 1, end + 1))
        calls = [float(sum(c[0] for c in self._buckets.get(s, {}).values())) for s in seconds]
        tokens = [float(sum(c[1] for c in self._buckets.get(s, {}).values())) for s in seconds]
        return {"t": [float(s) for s in seconds], "calls_per_s": calls, "tokens_per_s": tokens}

    def snapshot(self, now: float) -> dict[str, Any]:
        """The fleet's figures the console shows (the services' own figures added by the caller)."""
        self._prune(now)
        statuses = self._counts["status"]
        ended = {k: n for k, n in sorted(statuses.items()) if k != RUNNING and n > 0}
        versions = self._counts["running_version"]
        return {
            "now": now,
            "sessions": {"running": statuses[RUNNING], "ended": ended},
            "nodes": [
                {"node_id": node, "running": n["running"], "ended": n["ended"]}
                for node, n in sorted(self._nodes.items())
                if n["running"] or n["ended"]
            ],
            "rates": self.rates(now),
            "totals": {"calls": self.calls, "tokens": self.tokens, "records": self.records},
            "errors": [{"kind": k, "count": n} for k, n in self.errors.most_common()],
            "deadletters": self.deadletters,
            "policy_versions": [
                {"version": v, "running": n} for v, n in sorted(versions.items()) if n > 0
            ],
            "forgotten_sessions": self.forgotten,
            "history": self.history(now),
        }

    def page(self, filters: Mapping[str, str], offset: int, limit: int) -> dict[str, Any]:
        """A page of sessions, newest first, with the values each filter can take."""
        # Rows are filtered as they are; only the page's own are turned into JSON.
        total, rows = page_of(reversed(self.sessions.values()), filters, offset, limit)
        counts = self._counts
        return {
            "total": total,
            "offset": offset,
            "limit": limit,
            "items": [row.public() for row in rows],
            "facets": {
                "harness": sorted(k for k, n in counts["harness"].items() if n > 0),
                "status": sorted(k for k, n in counts["status"].items() if n > 0),
                "policy_version": sorted(k for k, n in counts["version"].items() if n > 0),
            },
        }

    def select(self, filters: Mapping[str, str]) -> frozenset[str]:
        """The ids of every session matching ``filters`` (a control's selection)."""
        active = {k: v for k, v in filters.items() if v != ""}
        return frozenset(row.session_id for row in self.sessions.values() if matches(row, active))
