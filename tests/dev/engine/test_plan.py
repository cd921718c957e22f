"""The engine's plan read from prompts rendered by the published templates, not by rollstream.

Each conversation is rendered with the family's published chat template (llama.cpp's copy, from
its PyPI sdist) by transformers, as vLLM renders it; the plan must find the turn the
conversation is at and write it so that the format the template itself describes reads back the
scripted call.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerFast

from rollstream.dev.backend.policies import default_scenarios_path
from rollstream.dev.backend.policies.scenarios import load_scenarios
from rollstream.dev.engine import plan
from rollstream.dev.engine.families import (
    ENGINE_FAMILIES,
    engine_family,
    template_of,
    vocabulary_of,
)
from rollstream.dev.engine.plan_file import compile_plan
from rollstream.dev.engine.templates import published
from rollstream.models.vocabularies import vocabulary_dir

BASH = {
    "type": "function",
    "function": {
        "name": "Bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"],
        },
    },
}
SYSTEM = {"role": "system", "content": "You are a coding agent in /tmp/work-1."}


@cache
def _tokenizer(family: str) -> PreTrainedTokenizerFast:
    folder = vocabulary_dir(vocabulary_of(family))
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


def _render(family: str, messages: list[dict[str, Any]], tools: list[Any] | None) -> str:
    spec = engine_family(family)
    rendered = _tokenizer(family).apply_chat_template(
        messages,
        tools=tools,
        chat_template=published(template_of(family)),
        tokenize=False,
        add_generation_prompt=True,
        bos_token=spec.specials.get("bos_token", ""),
        eos_token=spec.eos,
    )
    assert isinstance(rendered, str)
    return rendered


def _plan(family: str) -> dict[str, Any]:
    spec = engine_family(family)
    scenarios = load_scenarios(Path(default_scenarios_path()))
    return compile_plan(scenarios, spec.plan_format, spec.eos)


def _call(command: str, index: int) -> dict[str, Any]:
    return {
        "id": f"call{index:05d}",  # nine alphanumerics: Mistral's template requires them
        "type": "function",
        "function": {"name": "Bash", "arguments": {"command": command}},
    }


def _conversation(task: str, done: list[list[str]]) -> list[dict[str, Any]]:
    """The task, then one assistant turn per list of commands, each answered by the tool."""
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": task}]
    index = 0
    for commands in done:
        calls = [_call(command, index + i) for i, command in enumerate(commands)]
        index += len(calls)
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
    return messages


def _calls_written(family: str, text: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls in a turn, read the way each family's template tells its model to write them."""
    if family == "qwen3":  # "<tool_call>\n{"name": <function-name>, "arguments": <args>}\n"
        found = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)
        return [(c["name"], c["arguments"]) for c in map(json.loads, found)]
    if family == "qwen3-coder":  # <function=NAME><parameter=KEY>VALUE</parameter></function>
        calls = []
        for name, body in re.findall(r"<function=(\w+)>\n(.*?)</function>", text, re.S):
            params = re.findall(r"<parameter=(\w+)>\n(.*?)\n</parameter>", body, re.S)
            calls.append((name, dict(params)))
        return calls
    if family == "gpt-oss":  # harmony: to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>
        found = re.findall(
            r"to=functions\.(\w+) <\|constrain\|>json<\|message\|>(.*?)<\|call\|>", text
        )
        return [(name, json.loads(args)) for name, args in found]
    if family == "mistral":  # [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
        listed = re.search(r"\[TOOL_CALLS\](\[.*\])", text, re.S)
        return [(c["name"], c["arguments"]) for c in json.loads(listed.group(1))] if listed else []
    assert family == "llama-3"  # {"name": function name, "parameters": dictionary of args}
    try:
        call = json.loads(text)
    except ValueError:
        return []
    return [(call["name"], call["parameters"])]


@pytest.mark.parametrize("family", list(ENGINE_FAMILIES))
def test_the_plan_plays_a_scenario_turn_by_turn_from_the_rendered_prompt(family: str) -> None:
    compiled = _plan(family)
    task = "[scenario=solve] Write polar into hello.txt."
    first = plan.answer(compiled, _render(family, _conversation(task, []), [BASH]))
    assert _calls_written(family, first) == [
        ("Bash", {"command": "echo polar > hello.txt", "description": "Run a command"})
    ]
    rendered = _render(family, _conversation(task, [["echo polar > hello.txt"]]), [BASH])
    second = plan.answer(compiled, rendered)
    assert [name for name, _ in _calls_written(family, second)] == ["Bash"]
    assert _calls_written(family, second)[0][1]["command"] == "cat hello.txt"
    done = [["echo polar > hello.txt"], ["cat hello.txt"]]
    third = plan.answer(compiled, _render(family, _conversation(task, done), [BASH]))
    assert _calls_written(family, third) == []
    assert "Done. hello.txt contains polar." in third


@pytest.mark.parametrize("family", ["qwen3", "qwen3-coder", "mistral"])
def test_a_turn_of_parallel_calls_is_written_whole(family: str) -> None:
    compiled = _plan(family)
    rendered = _render(family, _conversation("[scenario=parallel] Go.", []), [BASH])
    commands = [
        args["command"] for _, args in _calls_written(family, plan.answer(compiled, rendered))
    ]
    assert commands == ["echo polar > hello.txt", "ls"]


@pytest.mark.parametrize("family", list(ENGINE_FAMILIES))
def test_a_request_without_tools_gets_the_side_answer(family: str) -> None:
    text = plan.answer(
        _plan(family), _render(family, [{"role": "user", "content": "Title?"}], None)
    )
    assert "Coding session." in text and _calls_written(family, text) == []


@pytest.mark.parametrize("family", list(ENGINE_FAMILIES))
def test_a_text_scenario_counts_its_turns_after_the_task_that_names_it(family: str) -> None:
    """aider's layout: few-shot pairs before the task, no tools, reflections after it."""
    compiled = _plan(family)
    turns = [t["text"] for s in compiled["scenarios"] if s["name"] == "aider" for t in s["turns"]]
    examples: list[dict[str, Any]] = [
        SYSTEM,
        {"role": "user", "content": "Change the greeting."},
        {"role": "assistant", "content": "greeting.py\n```\nprint('hi')\n```"},
        {"role": "user", "content": "I added hello.txt."},
        {"role": "assistant", "content": "Ok."},
    ]
    conversation = [*examples, {"role": "user", "content": "[scenario=aider] Write polar."}]
    first = plan.answer(compiled, _render(family, conversation, None))
    assert turns[0] in first and _calls_written(family, first) == []
    conversation += [  # its answer, then the files aider adds and its own "Ok."
        {"role": "assistant", "content": turns[0]},
        {"role": "user", "content": "I added hello.txt."},
        {"role": "assistant", "content": "Ok."},
        {"role": "user", "content": "The test failed."},
    ]
    assert turns[1] in plan.answer(compiled, _render(family, conversation, None))
    conversation += [
        {"role": "assistant", "content": turns[1]},
        {"role": "user", "content": "And now?"},
    ]
    assert "Done." in plan.answer(compiled, _render(family, conversation, None))


@pytest.mark.parametrize("family", list(ENGINE_FAMILIES))
def test_a_summary_asked_for_names_the_thread_and_the_thread_goes_on_from_it(family: str) -> None:
    """A harness compacting its context: the summary's request, then the history replaced."""
    compiled = _plan(family)
    task = "[scenario=compact] Write polar into hello.txt."
    # Claude Code's layout: the history, then the request, tools still offered.
    asking = _conversation(task, [["seq 1 3000"]])
    if family == "mistral":  # its template has a user message follow an assistant one only
        asking.append({"role": "assistant", "content": "Noted."})
    asking.append({"role": "user", "content": "Create a summary of the conversation so far."})
    summary = plan.answer(compiled, _render(family, asking, [BASH]))
    assert "[summary: scenario compact, 1 turns done]" in summary
    assert _calls_written(family, summary) == []
    # opencode's: a summarization agent reading the history written out as text, no tools.
    flattened = [
        {"role": "system", "content": "You are a context summarization agent."},
        {"role": "user", "content": f"[User]: {task}\n[Assistant tool call]: seq 1 3000"},
    ]
    assert "[summary: scenario compact, 1 turns done]" in plan.answer(
        compiled, _render(family, flattened, None)
    )
    # The history replaced by the summary: the thread goes on at its second turn.
    text = re.search(r"\[summary: [^\]]*\][^<\[]*", summary)
    assert text is not None
    resumed = [
        SYSTEM,
        {"role": "user", "content": "What did we do so far?"},
        {"role": "assistant", "content": text.group(0).strip()},
        {"role": "user", "content": "Continue."},
    ]
    second = plan.answer(compiled, _render(family, resumed, [BASH]))
    assert _calls_written(family, second)[0][1]["command"] == "echo polar > hello.txt"
    # A title generator's rules about what it is summarizing ask for no summary.
    title = {"role": "system", "content": "Title the message you are summarizing."}
    side = plan.answer(compiled, _render(family, [title, {"role": "user", "content": task}], None))
    assert "[summary:" not in side


def test_an_answer_without_calls_ends_the_episode_and_the_next_task_starts_over() -> None:
    messages = _conversation("[scenario=solve] Write polar.", [["echo polar > hello.txt"]])
    messages += [
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Again, please."},
    ]
    text = plan.answer(_plan("qwen3"), _render("qwen3", messages, [BASH]))
    assert _calls_written("qwen3", text)[0][1]["command"] == "echo polar > hello.txt"


def test_a_thinking_family_thinks_first_and_others_do_not() -> None:
    rendered = _render("qwen3", _conversation("[scenario=solve] Go.", []), [BASH])
    assert plan.answer(_plan("qwen3"), rendered).startswith("<think>\n")
    rendered = _render("qwen3-coder", _conversation("[scenario=solve] Go.", []), [BASH])
    assert "<think>" not in plan.answer(_plan("qwen3-coder"), rendered)


def test_without_a_named_scenario_a_session_keeps_the_one_drawn_for_its_task() -> None:
    compiled = _plan("qwen3")
    drawn = set()
    for workspace in range(12):
        system = {"role": "system", "content": f"You are a coding agent in /tmp/work-{workspace}."}
        first = [system, {"role": "user", "content": "Write polar into hello.txt."}]
        texts = [
            plan.answer(compiled, _render("qwen3", first, [BASH])),
            plan.answer(compiled, _render("qwen3", first, [BASH])),
        ]
        assert texts[0] == texts[1]
        drawn.add(texts[0])
    assert len(drawn) > 1  # other workspaces draw other scenarios


def test_a_turn_calling_a_tool_the_harness_lacks_says_so() -> None:
    other = json.loads(json.dumps(BASH))
    other["function"]["name"] = "Search"
    rendered = _render("qwen3", _conversation("[scenario=solve] Go.", []), [other])
    assert "Coding session." in plan.answer(_plan("qwen3"), rendered)  # no plan tool offered


def test_a_side_call_quoting_an_earlier_call_offers_no_tools() -> None:
    # A summary request carries the conversation as text, earlier calls included, and no tools.
    quoted = json.dumps({"name": "Bash", "arguments": {"command": "ls"}})
    messages = [{"role": "user", "content": f"Summarize: I ran <tool_call>{quoted}</tool_call>"}]
    text = plan.answer(_plan("qwen3"), _render("qwen3", messages, None))
    assert "Coding session." in text and _calls_written("qwen3", text) == []
