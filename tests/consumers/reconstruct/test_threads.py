"""A session's threads from its calls' callers: the main one, each sub-agent, who spawned whom."""

from __future__ import annotations

from datetime import timedelta

from rollstream.consumers.reconstruct.threads import threads_of
from rollstream.schemas import Caller, CallRecord, CallTimings
from rollstream.schemas.blobs import compress_json
from rollstream.schemas.trajectories import Thread
from tests.schemas.samples import CALL, T0


def call(call_id: str, second: int, caller: Caller | None, *tools: str) -> CallRecord:
    """A call started ``second`` seconds into the session, by ``caller``, calling ``tools``."""
    at = T0 + timedelta(seconds=second)
    calls = [
        {"id": f"t{i}", "function": {"name": n, "arguments": "{}"}} for i, n in enumerate(tools)
    ]
    answer = {"choices": [{"message": {"role": "assistant", "tool_calls": calls}}]}
    return CALL.model_copy(
        update={
            "call_id": call_id,
            "seq": second,
            "caller": caller,
            "timings": CallTimings(started_at=at, ended_at=at),
            "response": compress_json(answer),
        }
    )


def test_a_session_without_named_sub_agents_has_no_threads_listed() -> None:
    assert threads_of([call("a", 0, None), call("b", 1, Caller(session="s", retry=0))]) == []


def test_claude_code_s_sub_agent_is_spawned_by_the_main_call_before_its_first() -> None:
    main, sub = Caller(session="s"), Caller(session="s", agent="a1")
    calls = [
        call("m0", 0, main),
        call("m1", 1, main, "Agent"),  # delegates, and waits
        call("s0", 2, sub),
        call("m-side", 3, main),  # the main thread again while the sub-agent works
        call("s1", 4, sub),
        call("m2", 5, main),
    ]
    assert threads_of(reversed(calls)) == [  # any order in: the order they started out
        Thread(call_ids=["m0", "m1", "m-side", "m2"]),
        Thread(agent="a1", spawned_by="m1", call_ids=["s0", "s1"]),
    ]


def test_codex_s_threads_name_their_parents_and_nest() -> None:
    root = Caller(session="root")
    child = Caller(session="root", agent="t1", parent="root")  # the root thread is the session
    grandchild = Caller(session="root", agent="t2", parent="t1")
    calls = [
        call("r0", 0, root, "spawn_agent"),
        call("r1", 1, root, "exec_command"),  # spawning returns at once: the root goes on
        call("c0", 2, child, "spawn_agent"),
        call("c1", 3, child),
        call("g0", 4, grandchild),
        call("r2", 5, root),
    ]
    assert threads_of(calls) == [
        Thread(call_ids=["r0", "r1", "r2"]),
        Thread(agent="t1", spawned_by="r0", call_ids=["c0", "c1"]),
        Thread(agent="t2", parent="t1", spawned_by="c0", call_ids=["g0"]),
    ]


def test_opencode_s_sub_sessions_name_their_parent_session() -> None:
    """Each of opencode's sessions has its own id; a sub-session names the one that started it."""
    main = Caller(session="ses_main")
    sub = Caller(session="ses_sub", agent="ses_sub", parent="ses_main")
    nested = Caller(session="ses_nested", agent="ses_nested", parent="ses_sub")
    calls = [
        call("m0", 0, main, "task"),
        call("s0", 1, sub, "task"),
        call("n0", 2, nested),
        call("s1", 3, sub),
        call("m1", 4, main),
    ]
    assert threads_of(calls) == [
        Thread(call_ids=["m0", "m1"]),
        Thread(agent="ses_sub", spawned_by="m0", call_ids=["s0", "s1"]),
        Thread(agent="ses_nested", parent="ses_sub", spawned_by="s0", call_ids=["n0"]),
    ]
