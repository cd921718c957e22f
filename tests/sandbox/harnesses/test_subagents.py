"""Real harnesses starting real sub-agents through the interceptor: each call is recorded with
who made it, as the harness says (``CallRecord.caller``): the session, and the sub-agent's own
id on its calls (Claude Code's Agent tool; Codex's spawn_agent, a namespaced tool the
interceptor passes on and names again in the answer; opencode's task tool, whose sub-session
has an id of its own and names its parent's)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from rollstream.consumers.reconstruct.threads import threads_of
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.schemas import CallRecord, TopicNames
from rollstream.schemas.blobs import decompress_json
from rollstream.settings import KafkaSettings
from tests.harness_stack import MODEL, harnesses_installed, register, scripted_interceptor
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration

SPAWN_TOOL = {"claude-code": "Agent", "codex": "spawn_agent", "opencode": "task", "kilo": "task"}
SUB_TASK = "[scenario: solve] Create sub.txt containing polar, then say done."
#: opencode's main thread delegates with its task tool, which returns the sub-agent's answer.
SPAWN_OPENCODE = {
    "name": "spawn-opencode",
    "turns": [
        {
            "text": "Delegating.",
            "tool_call": {
                "tool": "task",
                "arguments": {
                    "description": "Create sub file",
                    "prompt": SUB_TASK,
                    "subagent_type": "general",
                },
            },
        },
        {"text": "Done."},
    ],
}

#: The main thread delegates and ends; each thread's task names the scenario it plays (behind
#: the interceptor the backend sees one session for both).
SCENARIOS = {
    "scenarios": [
        {
            "name": "solve",
            "turns": [
                {
                    "text": "I will create the file.",
                    "tool_call": {
                        "tool": "shell",
                        "arguments": {"command": "echo polar > sub.txt"},
                    },
                },
                {"text": "Done. sub.txt contains polar."},
            ],
        },
        {
            "name": "spawn-claude-code",
            "turns": [
                {
                    "text": "Delegating.",
                    "tool_call": {
                        "tool": "Agent",
                        "arguments": {
                            "description": "Create sub file",
                            "prompt": SUB_TASK,
                            "subagent_type": "general-purpose",
                        },
                    },
                },
                {"text": "Done."},
            ],
        },
        SPAWN_OPENCODE,
        {**SPAWN_OPENCODE, "name": "spawn-kilo"},  # built on opencode: the same task tool
        {
            "name": "spawn-codex",
            "turns": [
                {
                    "text": "Delegating.",
                    "tool_call": {"tool": "spawn_agent", "arguments": {"message": SUB_TASK}},
                },
                # Codex's spawn_agent returns at once: the main thread waits for sub.txt, then
                # for the sub-agent's last answer, whose notice must reach the main thread
                # before its own (a notice after it would start the main thread's script anew).
                {
                    "tool_call": {
                        "tool": "shell",
                        "arguments": {
                            "command": "for i in $(seq 120); do test -s sub.txt && "
                            "break; sleep 1; done; sleep 10; cat sub.txt"
                        },
                    }
                },
                {"text": "Done."},
            ],
        },
    ],
    "side_call_text": "Coding session.",
}


@pytest.mark.parametrize("name", ["claude-code", "codex", "opencode", "kilo"])
async def test_a_sub_agent_s_calls_are_recorded_as_its_own(
    name: str, kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    harness_bin = harnesses_installed()
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(yaml.safe_dump(SCENARIOS))
    session = f"{name}-{uuid.uuid4().hex[:8]}"
    async with scripted_interceptor(
        kafka_settings, tmp_path / "state", scenarios=scenarios
    ) as interceptor:
        register(interceptor, session)
        task = f"[scenario: spawn-{name}] Delegate: have sub.txt made."
        ctx = HarnessContext(interceptor.url, session, MODEL, task)
        launch = PRESETS[name].launch(ctx, harness_bin / PACKAGES[name][1])
        workdir = tmp_path / "work"
        result = await run_harness(launch, tmp_path / "home", workdir, tmp_path / "logs", 300)
    assert result.exit_code == 0, f"{name} failed:\n{result.stdout_tail}\n{result.stderr_tail}"
    assert (workdir / "sub.txt").read_text() == "polar\n"  # the sub-agent's work
    records = await read_records(
        kafka_settings,
        rollstream_topics.events,
        CallRecord,
        4,
        where=lambda r: r.session_id == session,
        timeout=30,
        settle_s=2.0,
    )
    assert all(r.caller is not None for r in records)
    callers = [r.caller for r in records if r.caller is not None]
    agents = {c.agent for c in callers}
    assert None in agents and len(agents) == 2, agents  # the main thread and one sub-agent
    sub = [c for c in callers if c.agent is not None]
    assert len(sub) >= 2  # its shell call, then its answer
    main = [c for c in callers if c.agent is None]
    assert len(main) >= 2
    [own_session] = {c.session for c in main}
    assert own_session and own_session != session  # the harness's own id, not rollstream's
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
