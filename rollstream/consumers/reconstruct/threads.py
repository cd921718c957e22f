"""A session's threads, from what its harness says of each call (``CallRecord.caller``).

A harness that names its sub-agents (Claude Code's agent id, Codex's thread id, opencode's
sub-session id) says which of a session's calls belong to which conversation; the reconstructor
lists those threads on the trajectory with the call that spawned each, so a trainer can tell a
sub-agent's turns from its parent's and see the tree. Segments still come from the tokens (the
strategies); the threads name their calls.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from rollstream.schemas import CallRecord
from rollstream.schemas.blobs import decompress_json
from rollstream.schemas.trajectories import Thread

#: The harnesses' tools that start a sub-agent (Claude Code's Agent, formerly Task; Codex's
#: spawn_agent; Qwen Code's agent; Gemini CLI's invoke_agent; opencode's task). A harness that
#: spawns and goes on (Codex) may call again before the sub-agent's first call: the spawner is
#: the parent's last call before it that called one of these, else its last call before it.
SPAWN_TOOLS = frozenset({"Agent", "Task", "spawn_agent", "agent", "invoke_agent", "task"})


def _parent(record: CallRecord, agents: Collection[str | None]) -> str | None:
    """The agent id of the thread that spawned ``record``'s, None for the main thread.

    A parent that is no thread's agent id is the main thread: Codex names it by the session's
    own id, opencode by its main session's.
    """
    parent = record.caller.parent if record.caller is not None else None
    return parent if parent in agents else None


def threads_of(calls: Iterable[CallRecord]) -> list[Thread]:
    """The session's threads: the main one, then the others as they began.

    Empty when its harness named no sub-agent (one thread, nothing to tell apart).
    """
    ordered = sorted(calls, key=lambda c: (c.timings.started_at, c.seq))
    members: dict[str | None, list[CallRecord]] = {None: []}
    for call in ordered:
        members.setdefault(call.caller.agent if call.caller else None, []).append(call)
    if len(members) == 1:
        return []
    threads = [Thread(call_ids=[c.call_id for c in members[None]])]
    for agent, own in members.items():  # in the order their first calls started
        if agent is None:
            continue
        parent = _parent(own[0], members)
        began = own[0].timings.started_at
        before = [c for c in members.get(parent, []) if c.timings.started_at < began]
        spawners = [c for c in before if SPAWN_TOOLS & set(_tools_called(c))] or before
        threads.append(
            Thread(
                agent=agent,
                parent=parent,
                spawned_by=spawners[-1].call_id if spawners else None,
                call_ids=[c.call_id for c in own],
            )
        )
    return threads


def _tools_called(call: CallRecord) -> list[str]:
    """The names of the tools a call's answer called (none when its answer was not kept)."""
    try:
        answer = decompress_json(call.response) if call.response is not None else None
        message = answer["choices"][0]["message"] if isinstance(answer, dict) else {}
        return [str(c["function"]["name"]) for c in message.get("tool_calls") or []]
    except (KeyError, IndexError, TypeError, ValueError):
        return []
