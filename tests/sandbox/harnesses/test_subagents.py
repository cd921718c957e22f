"""Real harnesses starting real sub-agents through the interceptor: each call is recorded with
who made it, as the harness says (``CallRecord.caller``): the session, and the sub-agent's own
id on its calls (Claude Code's Agent tool; Codex's spawn_agent, a namespaced tool the
interceptor passes on and names again in the answer; opencode's task tool, whose sub-session
has an id of its own and names its parent's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollstream.consumers.reconstruct.threads import threads_of
from rollstream.schemas import TopicNames
from rollstream.schemas.blobs import decompress_json
from rollstream.settings import KafkaSettings
from tests.sandbox.harnesses.spawning import SPAWN_TOOL, spawning_session

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["claude-code", "codex", "opencode", "kilo"])
async def test_a_sub_agent_s_calls_are_recorded_as_its_own(
    name: str, kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    records = await spawning_session(name, kafka_settings, tmp_path)
    assert all(r.caller is not None for r in records)
    callers = [r.caller for r in records if r.caller is not None]
    agents = {c.agent for c in callers}
    assert None in agents and len(agents) == 2, agents  # the main thread and one sub-agent
    sub = [c for c in callers if c.agent is not None]
    assert len(sub) >= 2  # its shell call, then its answer
    main = [c for c in callers if c.agent is None]
    assert len(main) >= 2
    [own_session] = {c.session for c in main}
    assert own_session and own_session != records[0].session_id  # the harness's id, not ours
    assert {c.parent for c in main} == {None}
    if name in ("opencode", "kilo"):  # a session of its own, naming the main one
        assert {c.session for c in sub} == {c.agent for c in sub}
        assert {c.parent for c in sub} == {own_session}
    else:  # one harness session, sub-agent included; Codex names the spawning thread (its
        # root thread, whose id is the session's)
        assert {c.session for c in sub} == {own_session}
        assert {c.parent for c in sub} == {own_session if name == "codex" else None}
    # The reconstructor's thread list: the main thread, the sub-agent, and the main call whose
    # answer spawned it.
    threads = threads_of(records)
    assert [t.agent for t in threads] == [None, *{c.agent for c in sub}]
    by_id = {r.call_id: r for r in records}
    assert {r.caller.agent for i in threads[1].call_ids if (r := by_id[i]).caller} == {
        threads[1].agent
    }
    spawner = by_id[threads[1].spawned_by or ""]
    assert spawner.call_id in threads[0].call_ids
    answer = decompress_json(spawner.response or b"")
    names = [c["function"]["name"] for c in answer["choices"][0]["message"]["tool_calls"]]
    assert names == [SPAWN_TOOL[name]]
