"""A real harness that starts a sub-agent, through the interceptor: its calls, as recorded.

The scripted backend plays a main thread that delegates with the harness's own tool (Claude
Code's Agent, Codex's spawn_agent, opencode's and kilo's task) and a sub-agent that makes
``sub.txt``; each thread's task names the scenario it plays.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.schemas import CallRecord, TopicNames
from rollstream.settings import KafkaSettings
from tests.harness_stack import MODEL, harnesses_installed, register, scripted_interceptor
from tests.kafka_reading import read_records

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


def spawn_task(name: str) -> str:
    """The task harness ``name`` is given: it delegates with its own tool."""
    return f"[scenario: spawn-{name}] Delegate: have sub.txt made."


async def spawning_session(name: str, kafka: KafkaSettings, tmp_path: Path) -> list[CallRecord]:
    """Run harness ``name`` on a task it delegates; its session's records once all are in.

    Fails the test unless the harness exits 0 and the sub-agent made ``sub.txt``.
    """
    harness_bin = harnesses_installed()
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(yaml.safe_dump(SCENARIOS))
    session = f"{name}-{uuid.uuid4().hex[:8]}"
    async with scripted_interceptor(kafka, tmp_path / "state", scenarios=scenarios) as interceptor:
        register(interceptor, session)
        ctx = HarnessContext(interceptor.url, session, MODEL, spawn_task(name))
        launch = PRESETS[name].launch(ctx, harness_bin / PACKAGES[name][1])
        workdir = tmp_path / "work"
        result = await run_harness(launch, tmp_path / "home", workdir, tmp_path / "logs", 300)
    assert result.exit_code == 0, f"{name} failed:\n{result.stdout_tail}\n{result.stderr_tail}"
    assert (workdir / "sub.txt").read_text() == "polar\n"  # the sub-agent's work
    return await read_records(
        kafka,
        TopicNames(kafka.topic_prefix).events,
        CallRecord,
        4,
        where=lambda r: r.session_id == session,
        timeout=30,
        settle_s=2.0,
    )
