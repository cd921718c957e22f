"""The fleet's figures from session and call records: counts, rates, errors, pages, bounds."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from rollstream.consumers.console.fleet import Fleet, page_of
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import (
    CallError,
    CallRecord,
    CallStatus,
    SessionEnded,
    SessionStarted,
    SessionStatus,
)

SHAPE = SyntheticShape(turns=3, system_tokens=16, tool_result_tokens=4, completion_tokens=5)


def _feed(
    fleet: Fleet, session_id: str, *, end: bool = True, task_id: str = "smoke-task"
) -> list[CallRecord]:
    session = synthetic_session(session_id, SHAPE, task_id=task_id)
    for record in session.records:
        if isinstance(record, SessionStarted):
            fleet.started(record)
        elif isinstance(record, CallRecord):
            fleet.call(record)
        elif isinstance(record, SessionEnded) and end:
            fleet.ended(record)
    return session.calls


def test_sessions_are_running_until_they_end_and_are_counted_by_how_they_ended() -> None:
    fleet = Fleet()
    _feed(fleet, "a")
    _feed(fleet, "b", end=False)
    snap = fleet.snapshot(datetime.now(UTC).timestamp())
    assert snap["sessions"] == {"running": 1, "ended": {"completed": 1}}
    assert snap["totals"]["calls"] == 6
    assert snap["totals"]["tokens"] == 6 * SHAPE.completion_tokens
    assert snap["nodes"] == [{"node_id": "?", "running": 1, "ended": 1}]
    assert snap["policy_versions"] == [{"version": 0, "running": 1}]


def test_rates_count_the_calls_of_the_window_by_harness_and_model() -> None:
    fleet = Fleet(rate_window_s=10)
    calls = _feed(fleet, "a")
    newest = max(c.timings.ended_at or c.timings.started_at for c in calls).timestamp()
    [rate] = fleet.snapshot(newest + 1)["rates"]
    assert rate["harness"] == "synthetic"
    assert rate["calls_per_s"] == 3 / 10
    assert rate["tokens_per_s"] == 3 * SHAPE.completion_tokens / 10
    # A minute later nothing is in the window, and the history still holds them.
    later = fleet.snapshot(newest + 60)
    assert later["rates"] == []
    assert sum(later["history"]["calls_per_s"]) == 3


def test_calls_of_an_old_log_draw_no_rate() -> None:
    fleet = Fleet(history_s=300)
    calls = _feed(fleet, "new")
    newest = max(c.timings.ended_at or c.timings.started_at for c in calls).timestamp()
    old = synthetic_session("old", SHAPE).calls[0]
    hour_ago = old.timings.started_at - timedelta(hours=1)
    fleet.call(
        old.model_copy(
            update={
                "timings": old.timings.model_copy(
                    update={"started_at": hour_ago, "first_token_at": None, "ended_at": hour_ago}
                )
            }
        )
    )
    snap = fleet.snapshot(newest + 1)
    assert snap["totals"]["calls"] == 4  # counted, but in no second of the chart
    assert sum(snap["history"]["calls_per_s"]) == 3


def test_failed_calls_are_counted_by_error_kind() -> None:
    fleet = Fleet()
    [call, *_] = _feed(fleet, "a")
    failed = call.model_copy(
        update={
            "call_id": "x",
            "status": CallStatus.ERROR,
            "error": CallError(type="upstream_timeout", message="slow"),
        }
    )
    fleet.call(failed)
    fleet.call(failed.model_copy(update={"call_id": "y"}))
    fleet.call(call.model_copy(update={"call_id": "z", "status": CallStatus.CANCELLED}))
    assert fleet.snapshot(0)["errors"] == [
        {"kind": "upstream_timeout", "count": 2},
        {"kind": "cancelled", "count": 1},
    ]


def test_pages_filter_and_come_newest_first() -> None:
    fleet = Fleet()
    for i in range(5):
        _feed(fleet, f"s{i}", end=i % 2 == 0, task_id=f"t{i % 2}")
    page = fleet.page({"task_id": "t0", "status": ""}, 0, 2)
    assert page["total"] == 3
    assert [r["session_id"] for r in page["items"]] == ["s4", "s2"]
    assert fleet.page({"task_id": "t0"}, 2, 2)["items"][0]["session_id"] == "s0"
    assert fleet.page({"status": "running"}, 0, 10)["total"] == 2
    assert fleet.page({"policy_version": "0"}, 0, 10)["total"] == 5
    assert page["facets"]["status"] == ["completed", "running"]


def test_page_of_counts_every_match_but_keeps_only_the_slice() -> None:
    rows = [{"k": str(i % 3), "i": i} for i in range(10)]
    total, items = page_of(rows, {"k": "1"}, 1, 2)
    assert total == 3 and [r["i"] for r in items] == [4, 7]
    assert page_of(rows, {"k": ""}, 8, 5)[0] == 10


def test_the_oldest_ended_sessions_are_forgotten_first() -> None:
    fleet = Fleet(max_sessions=3)
    _feed(fleet, "running-1", end=False)
    for i in range(4):
        _feed(fleet, f"ended-{i}")
    assert list(fleet.sessions) == ["running-1", "ended-2", "ended-3"]
    assert fleet.snapshot(0)["forgotten_sessions"] == 2


def test_past_the_call_bound_the_oldest_ended_sessions_are_forgotten() -> None:
    fleet = Fleet(max_calls=10)
    per_session = len(_feed(fleet, "running-1", end=False))
    for i in range(4):
        _feed(fleet, f"ended-{i}")
    kept = 10 // per_session
    assert list(fleet.sessions) == ["running-1", *[f"ended-{i}" for i in range(5 - kept, 4)]]
    assert fleet.held_calls == kept * per_session <= 10
    assert fleet.snapshot(0)["forgotten_sessions"] == 5 - kept


def test_a_session_alone_past_the_call_bound_keeps_its_newest_calls() -> None:
    fleet = Fleet(max_calls=10)
    calls = _feed(fleet, "ended-0") + _feed(fleet, "long", end=False)
    template = calls[-1]
    for seq in range(3, 13):
        fleet.call(template.model_copy(update={"call_id": f"late-{seq}", "seq": seq}))
    assert list(fleet.sessions) == ["long"]  # the ended session went first
    row = fleet.sessions["long"]
    # Down to nine tenths of the bound when it passed it, then growing again.
    assert [c.call_id for c in row.calls] == [f"late-{seq}" for seq in range(4, 13)]
    assert fleet.page({}, 0, 1)["items"][0]["calls"] == 3 + 10
    assert fleet.held_calls == 9 and fleet.calls_forgotten == 4
    assert fleet.calls == len(calls) + 10


def test_running_sessions_past_the_call_bound_keep_their_rows_and_newest_calls() -> None:
    fleet = Fleet(max_calls=6)
    fed = {sid: _feed(fleet, sid, end=False) for sid in ("r1", "r2", "r3")}
    assert list(fleet.sessions) == ["r1", "r2", "r3"] and fleet.forgotten == 0
    # Past the bound, each kept its newest calls down to an even share (6 x 0.9 / 3 = 1); the
    # session that started then got its timeline.
    held = {sid: [c.call_id for c in fleet.sessions[sid].calls] for sid in fed}
    assert held == {"r1": [fed["r1"][-1].call_id], "r2": [fed["r2"][-1].call_id]} | {
        "r3": [c.call_id for c in fed["r3"]]
    }
    assert fleet.held_calls == 5 and fleet.calls_forgotten == 4
    assert [r["calls"] for r in fleet.page({}, 0, 10)["items"]] == [3, 3, 3]


def test_a_session_first_seen_ending_has_its_facts() -> None:
    fleet = Fleet()
    ended = synthetic_session("late", SHAPE, task_id="tt").records[-1]
    assert isinstance(ended, SessionEnded)
    fleet.ended(ended)
    [row] = fleet.page({}, 0, 10)["items"]
    assert (row["task_id"], row["status"], row["started_at"]) == ("tt", "completed", None)


def test_counts_kept_as_rows_change_agree_with_counting_the_rows() -> None:
    """Random arrivals, ends before starts, re-ends and forgetting: the kept counts hold."""
    import random

    rng = random.Random(7)
    fleet = Fleet(max_sessions=15, max_calls=25)
    template = synthetic_session("x", SHAPE)
    started, ended = template.records[0], template.records[-1]
    assert isinstance(started, SessionStarted) and isinstance(ended, SessionEnded)
    statuses = [SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.TIMEOUT]
    for _ in range(600):
        sid = f"s{rng.randrange(30)}"
        if rng.random() < 0.3:
            fleet.call(template.calls[0].model_copy(update={"session_id": sid}))
        elif rng.random() < 0.5:
            fleet.started(
                started.model_copy(
                    update={
                        "session_id": sid,
                        "node_id": rng.choice(["n1", "n2", ""]),
                        "policy_version": rng.randrange(3),
                        "harness": rng.choice(["pi", "codex"]),
                    }
                )
            )
        else:
            fleet.ended(
                ended.model_copy(update={"session_id": sid, "status": rng.choice(statuses)})
            )
        rows = list(fleet.sessions.values())
        assert fleet.held_calls == sum(len(r.calls) for r in rows) <= 25
        assert set(fleet._ended) <= set(fleet.sessions)
        snap = fleet.snapshot(0)
        running = [r for r in rows if r.status == "running"]
        assert snap["sessions"]["running"] == len(running)
        assert snap["sessions"]["ended"] == dict(
            sorted(Counter(r.status for r in rows if r.status != "running").items())
        )
        nodes = {n["node_id"]: (n["running"], n["ended"]) for n in snap["nodes"]}
        for node in {r.node_id or "?" for r in rows}:
            mine = [r for r in rows if (r.node_id or "?") == node]
            ran = sum(r.status == "running" for r in mine)
            assert nodes[node] == (ran, len(mine) - ran)
        versions = Counter(r.policy_version for r in running)
        assert snap["policy_versions"] == [
            {"version": v, "running": n} for v, n in sorted(versions.items())
        ]
        facets = fleet.page({}, 0, 1)["facets"]
        assert facets["harness"] == sorted({r.harness for r in rows})
        assert facets["policy_version"] == sorted({r.policy_version for r in rows})
    assert len(fleet.sessions) <= 15 and fleet.forgotten > 0 and fleet.held_calls > 0
