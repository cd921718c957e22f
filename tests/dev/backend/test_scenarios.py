"""Scenario files: validation, scenario choice, turn selection, tool mapping."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from rollstream.dev.backend.policies.base import PolicyError
from rollstream.dev.backend.policies.scenarios import (
    ScenarioFile,
    ToolCallSpec,
    Turn,
    count_assistant_turns,
    count_prompt_turns,
    load_scenarios,
    offered_tools,
    resolve_call,
    scenario_named,
    tools_in_prompt,
    turn_text,
)
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.errors import ConfigurationError
from rollstream.models.hermes import parse_tool_calls
from rollstream.models.tokenizer import ChatTokenizer


def _file(**extra: object) -> ScenarioFile:
    return ScenarioFile.model_validate(
        {
            "scenarios": [
                {"name": "a", "turns": [{"text": "A"}]},
                {"name": "b", "turns": [{"text": "B"}], "weight": 1},
            ],
            **extra,
        }
    )


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("Bash", {"command": "ls", "description": "Run a command"}),
        ("exec_command", {"cmd": "ls"}),
        ("run_shell_command", {"command": "ls"}),
        ("bash", {"command": "ls"}),
        ("shell", {"command": ["bash", "-lc", "ls"]}),
    ],
)
def test_shell_maps_to_each_harness_tool(tool: str, expected: dict[str, object]) -> None:
    name, arguments = resolve_call(ToolCallSpec(tool="shell", arguments={"command": "ls"}), [tool])
    assert (name, arguments) == (tool, expected)


def test_shell_picks_the_offered_shell_among_other_tools() -> None:
    offered = ["Read", "Edit", "Bash"]
    assert (
        resolve_call(ToolCallSpec(tool="shell", arguments={"command": "x"}), offered)[0] == "Bash"
    )


#: The tools Gemini CLI 0.61.0 offers, in its order (captured from its first request).
GEMINI_CLI_TOOLS = [
    "update_topic",
    "list_directory",
    "read_file",
    "grep_search",
    "glob",
    "replace",
    "write_file",
    "web_fetch",
    "run_shell_command",
    "list_background_processes",
    "read_background_output",
    "google_web_search",
    "enter_plan_mode",
    "invoke_agent",
    "activate_skill",
]


def test_shell_resolves_to_gemini_clis_run_shell_command() -> None:
    # The interceptor hands the backend Chat Completions tools translated from Gemini's.
    tools = [{"type": "function", "function": {"name": n}} for n in GEMINI_CLI_TOOLS]
    call = ToolCallSpec(tool="shell", arguments={"command": "echo polar > hello.txt"})
    assert resolve_call(call, offered_tools(tools)) == (
        "run_shell_command",
        {"command": "echo polar > hello.txt"},
    )


def test_shell_without_a_shell_tool_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match="offers none of"):
        resolve_call(ToolCallSpec(tool="shell"), ["Read"])


def test_named_tools_must_be_offered() -> None:
    assert resolve_call(ToolCallSpec(tool="Read", arguments={"p": 1}), ["Read"]) == (
        "Read",
        {"p": 1},
    )
    with pytest.raises(PolicyError, match="'Write', which the request does not offer"):
        resolve_call(ToolCallSpec(tool="Write"), ["Read"])


def test_turn_text_parses_back_to_the_scripted_calls() -> None:
    turn = Turn(
        text="Two at once.",
        tool_calls=[
            ToolCallSpec(tool="shell", arguments={"command": "ls"}),
            ToolCallSpec(tool="shell", arguments={"command": "pwd"}),
        ],
    )
    for seed in range(10):  # compact and spaced JSON both parse
        parsed = parse_tool_calls(turn_text(turn, ["bash"], random.Random(seed)))
        assert parsed.content == "Two at once.\n"
        assert [json.loads(c.arguments) for c in parsed.tool_calls] == [
            {"command": "ls"},
            {"command": "pwd"},
        ]


def test_turn_count_and_offered_tools() -> None:
    call = {"id": "1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "context"},
        {"role": "assistant", "content": "Got it."},  # a canned acknowledgement: no turn
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "ok"},
    ]
    assert count_assistant_turns(messages) == 2
    assert count_assistant_turns([*messages, {"role": "assistant", "content": "done"}]) == 0
    start = "<|im_start|>assistant"
    rendered = f"u{start}Got it.{start}<tool_call>x{start}<tool_call>y{start}"
    assert count_prompt_turns(rendered, start, "<tool_call>") == 2
    assert count_prompt_turns(f"u{start}", start, "<tool_call>") == 0
    assert offered_tools([{"type": "function", "function": {"name": "bash"}}]) == ["bash"]
    prompt = '<tools>\n{"type": "function", "function": {"name": "Bash"}}\n</tools> "name": "x"'
    assert tools_in_prompt(prompt) == ["Bash"]


def test_choice_by_assignment_by_key_suffix_and_by_seeded_draw() -> None:
    scenarios = _file(assign={"sess-1": "b"})
    assert scenarios.choose("sess-1", 0).name == "b"
    assert scenarios.choose("anything@a", 0).name == "a"
    with pytest.raises(PolicyError, match="unknown scenario 'zzz'"):
        scenarios.choose("x@zzz", 0)
    # Same session, same scenario; different sessions cover both.
    assert {scenarios.choose("s-7", 3).name for _ in range(5)} == {scenarios.choose("s-7", 3).name}
    drawn = {scenarios.choose(f"s-{i}", 3).name for i in range(40)}
    assert drawn == {"a", "b"}


def test_a_thread_plays_the_scenario_its_task_names() -> None:
    """A sub-agent shares its parent's session (the same key) but not its scenario: the task it
    was given names the one it plays; its parent's task names another, or none."""
    scenarios = _file(assign={"sess-1": "b"})
    parent: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent. [scenario: x] is how tasks are named."},
        {"role": "user", "content": "Create hello.txt"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "[scenario: a] spawned"},
    ]
    assert scenario_named(parent) is None  # only user messages name one
    assert scenarios.choose("sess-1", 0, scenario_named(parent)).name == "b"
    child: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "<context/>"}]},
        {"role": "user", "content": [{"type": "text", "text": "[scenario: a] create sub.txt"}]},
        {"role": "user", "content": "[scenario: b] later"},  # the first naming one decides
    ]
    assert scenario_named(child) == "a"
    assert scenarios.choose("sess-1", 0, scenario_named(child)).name == "a"
    assert scenario_named(None, "<|im_start|>user\n[scenario: b] go<|im_end|>") == "b"
    with pytest.raises(PolicyError, match="unknown scenario 'zzz'"):
        scenarios.choose("sess-1", 0, "zzz")


def test_weights_bias_the_draw() -> None:
    scenarios = ScenarioFile.model_validate(
        {
            "scenarios": [
                {"name": "common", "weight": 9, "turns": [{"text": "x"}]},
                {"name": "rare", "weight": 1, "turns": [{"text": "y"}]},
            ]
        }
    )
    names = [scenarios.choose(f"s{i}", 0).name for i in range(400)]
    assert 0.8 < names.count("common") / 400 < 0.97


def test_a_scenario_of_weight_0_plays_only_where_named() -> None:
    scenarios = ScenarioFile.model_validate(
        {
            "scenarios": [
                {"name": "drawn", "turns": [{"text": "x"}]},
                {"name": "named-only", "weight": 0, "turns": [{"text": "y"}]},
            ]
        }
    )
    assert {scenarios.choose(f"s{i}", 0).name for i in range(200)} == {"drawn"}
    assert scenarios.choose("s1", 0, "named-only").name == "named-only"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("scenarios: []", "at least 1"),
        ("scenarios: [{name: a, turns: [{}]}]", "needs text, tool_call or tool_calls"),
        ("scenarios: [{name: a, turns: [{text: x}]}]\nassign: {s: b}", "unknown scenarios"),
        ("scenarios: [{name: a, turns: [{text: x}]}, {name: a, turns: [{text: y}]}]", "repeat"),
        ("scenarios: [{name: a, turns: [{text: x, typo: 1}]}]", "typo"),
        ("scenarios: [{name: a, weight: 0, turns: [{text: x}]}]", "no scenario can be drawn"),
        ("scenarios: [{name: a, weight: -1, turns: [{text: x}]}]", "greater than or equal"),
        ("scenarios: [", "cannot read"),
        (
            "scenarios: [{name: a, protocol: text, turns: [{tool_call: {tool: shell}}]}]",
            "protocol text: its turns are texts",
        ),
    ],
)
def test_invalid_files_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=message):
        load_scenarios(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read scenarios"):
        load_scenarios(tmp_path / "nope.yaml")


def test_shipped_scenarios_load() -> None:
    from rollstream.dev.backend.policies import default_scenarios_path

    assert {s.name for s in load_scenarios(Path(default_scenarios_path())).scenarios} >= {"solve"}


def test_tools_are_read_from_a_prompt_the_shipped_template_rendered() -> None:
    # Its preamble says "within <tools></tools> XML tags" before the list itself.
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    tools = [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        for name in ("bash", "read_file")
    ]
    prompt = tokenizer.render([{"role": "user", "content": "hi"}], tools)
    assert "<tools></tools>" in prompt
    assert tools_in_prompt(prompt) == ["bash", "read_file"]
