"""Scenarios of the scripted policy: what "the model" answers, turn by turn, from a YAML file.

    scenarios:
      - name: solve
        weight: 2
        turns:
          - tool_call: {tool: shell, arguments: {command: "echo polar > hello.txt"}}
          - text: Done.
      - name: parallel
        turns:
          - tool_calls:
              - {tool: shell, arguments: {command: ls}}
              - {tool: shell, arguments: {command: pwd}}
          - text: Both ran.
    side_call_text: OK.          # answer to requests that offer no tools
    assign: {session-42: solve}  # optional: session (API key) -> scenario

A scenario of weight 0 is never drawn: it plays only where a task names it.

A scenario of ``protocol: text`` is for a harness that offers the model no tools and reads its
answers itself (aider's edit formats): its turns are texts, served to requests without tools,
the turn counted by its own answers in the conversation (told by their text: the harness's
own messages between them do not count).

The abstract ``shell`` tool becomes the shell tool the request offers, with its argument names.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rollstream.dev.backend.policies.base import PolicyError
from rollstream.errors import ConfigurationError

SHELL = "shell"


def _cmd(key: str) -> Any:
    return lambda args: (
        {key: args.get("command", "")} | {k: v for k, v in args.items() if k != "command"}
    )


# The shell tools of the harnesses (../shared/harnesses.md) and how each takes the command.
SHELL_TOOLS: dict[str, Any] = {
    "Bash": lambda args: (
        {"command": args.get("command", ""), "description": "Run a command"}
        | {k: v for k, v in args.items() if k != "command"}
    ),
    "exec_command": _cmd("cmd"),
    "run_shell_command": _cmd("command"),  # Gemini CLI and Qwen Code, its fork
    "bash": _cmd("command"),
    "terminal": _cmd("command"),  # OpenHands
    # Codex's older tool takes an argv.
    "shell": lambda args: {"command": ["bash", "-lc", args.get("command", "")]},
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCallSpec(_Strict):
    """A call the scripted model makes: a tool by name (or ``shell``) and its arguments."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Turn(_Strict):
    """One assistant turn: text, one or more tool calls, or text followed by calls."""

    text: str | None = None
    tool_call: ToolCallSpec | None = None
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_empty(self) -> Turn:
        if self.text is None and self.tool_call is None and not self.tool_calls:
            raise ValueError("a turn needs text, tool_call or tool_calls")
        return self

    @property
    def calls(self) -> list[ToolCallSpec]:
        """Every call of the turn."""
        return ([self.tool_call] if self.tool_call else []) + list(self.tool_calls)


class Scenario(_Strict):
    """A named list of turns; after the last one the model answers ``final_text``."""

    name: str
    #: How often it is drawn against the others; 0: only where a task names it.
    weight: float = Field(default=1.0, ge=0)
    turns: list[Turn] = Field(min_length=1)
    final_text: str = "Done."
    #: ``tools``: turns answer requests that offer tools; ``text``: requests without (see above).
    protocol: Literal["tools", "text"] = "tools"

    @model_validator(mode="after")
    def _text_turns(self) -> Scenario:
        if self.protocol == "text" and any(turn.calls or turn.text is None for turn in self.turns):
            raise ValueError(f"scenario {self.name!r} is of protocol text: its turns are texts")
        return self


class ScenarioFile(_Strict):
    """All scenarios of a file, and how sessions are assigned to them."""

    scenarios: list[Scenario] = Field(min_length=1)
    side_call_text: str = "OK."
    assign: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> ScenarioFile:
        names = [s.name for s in self.scenarios]
        if len(set(names)) != len(names):
            raise ValueError(f"scenario names repeat: {names}")
        unknown = sorted(set(self.assign.values()) - set(names))
        if unknown:
            raise ValueError(f"assign names unknown scenarios: {unknown}")
        if not any(s.weight > 0 for s in self.scenarios):
            raise ValueError("no scenario can be drawn: give one a weight above 0")
        return self

    def by_name(self, name: str) -> Scenario:
        """The scenario called ``name``; PolicyError if there is none."""
        for scenario in self.scenarios:
            if scenario.name == name:
                return scenario
        raise PolicyError(
            f"unknown scenario {name!r}; known: {', '.join(s.name for s in self.scenarios)}"
        )

    def choose(self, session: str | None, seed: int, named: str | None = None) -> Scenario:
        """The scenario of a thread: named in its task, assigned, after ``@`` in the key, drawn.

        ``named``: what the thread's task names (:func:`scenario_named`); a sub-agent shares
        its parent's session but plays the scenario its task names. The draw is seeded by
        (seed, session), so every call of a session gets the same scenario while the samples
        of one task (different sessions) differ.
        """
        if named is not None:
            return self.by_name(named)
        if session is not None:
            if session in self.assign:
                return self.by_name(self.assign[session])
            if "@" in session:
                return self.by_name(session.rsplit("@", 1)[1])
        digest = hashlib.sha256(f"{seed}:{session}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "little"))
        return rng.choices(self.scenarios, weights=[s.weight for s in self.scenarios])[0]


def load_scenarios(path: Path) -> ScenarioFile:
    """Read and validate a scenario file; ConfigurationError says what is wrong and where."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"cannot read scenarios from {path}: {exc}") from exc
    try:
        return ScenarioFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid scenario file {path}: {exc}") from exc


def offered_tools(tools: list[dict[str, Any]] | None) -> list[str]:
    """Names of the functions a Chat Completions request offers."""
    names = []
    for tool in tools or []:
        function = tool.get("function", tool)
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


_TOOL_NAME_IN_PROMPT = re.compile(r'"name":\s*"([^"]+)"')


def tools_in_prompt(prompt_text: str) -> list[str]:
    """Tool names in a rendered prompt's tool section (for raw-prompt completions)."""
    # The last pair: the template's preamble mentions "<tools></tools>" before the list.
    end = prompt_text.rfind("</tools>")
    start = prompt_text.rfind("<tools>", 0, end)
    if start < 0 or end < 0:
        return []
    return _TOOL_NAME_IN_PROMPT.findall(prompt_text[start:end])


#: A task may name the scenario its thread plays: "[scenario: solve] Create hello.txt ...".
_NAMED = re.compile(r"\[scenario: ([\w.-]+)\]")


def scenario_named(messages: list[dict[str, Any]] | None, prompt_text: str = "") -> str | None:
    """The scenario a conversation's task names, or None.

    The first user message naming one decides (for a raw prompt, the rendered text's first);
    after a compaction, which drops the task, the summary the policy wrote names it.
    """
    if messages is None:
        found = _NAMED.search(prompt_text)
        return found.group(1) if found else None
    for message in messages:
        if message.get("role") == "user" and (found := _NAMED.search(_text_of(message))):
            return found.group(1)
    summary = summarised(messages)
    return None if summary is None else summary[0]


def count_assistant_turns(messages: list[dict[str, Any]]) -> int:
    """The index of the next scripted turn: tool-calling turns since the last answer.

    An assistant message without tool calls ends an episode (a final answer, or a canned
    acknowledgement such as Qwen Code's "Got it. Thanks for the context!"), so the next user
    request starts the scenario from its first turn. A summary the policy wrote (a compacted
    history) counts the turns it says were done, whoever's message the harness put it in.
    """
    turns = 0
    for message in messages:
        if found := _SUMMARY.search(_text_of(message)):
            turns = int(found.group(2))
        elif message.get("role") == "assistant":
            turns = turns + 1 if message.get("tool_calls") else 0
    return turns


#: The scripted policy's summary of a thread (a harness compacting its context asked for it):
#: its scenario and the turns done, which the thread reads back once the history is replaced,
#: as a model goes on from the summary it wrote. The engine's plan writes and reads the same.
SUMMARY_TEMPLATE = (
    "[summary: scenario {name}, {turns} turns done] The steps asked for so far have run as "
    "planned; the work goes on from the next step of the plan."
)
SUMMARY_PATTERN = r"\[summary: scenario ([\w.-]+), (\d+) turns done\]"
_SUMMARY = re.compile(SUMMARY_PATTERN)


def summary_of(name: str, turns: int) -> str:
    """The summary the scripted policy writes of a thread at turn ``turns`` of ``name``."""
    return SUMMARY_TEMPLATE.format(name=name, turns=turns)


def summarised(messages: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The scenario and turns done of the last summary the policy wrote in ``messages``."""
    for message in reversed(messages):
        if found := _SUMMARY.search(_text_of(message)):
            return found.group(1), int(found.group(2))
    return None


def turns_mentioned(scenario: Scenario, messages: list[dict[str, Any]]) -> int:
    """How many of ``scenario``'s turns, from its first, the messages' text shows were run.

    A turn counts when each of its commands appears: a harness asking for a summary may write
    the history as text in one message (opencode does), with no tool calls to count.
    """
    text = "\n".join(_text_of(message) for message in messages)
    done = 0
    for turn in scenario.turns:
        commands = [str(call.arguments.get("command", "")) for call in turn.calls]
        if not commands or not all(command and command in text for command in commands):
            break
        done += 1
    return done


def asks_for_summary(messages: list[dict[str, Any]]) -> bool:
    """Whether a request asks for a summary of the conversation (a harness compacting it).

    Its system message or its last user message says so near its start: opencode's "You are
    a context summarization agent", Claude Code's "create a detailed summary of the
    conversation so far" (after its warning not to call tools), Codex's "CONTEXT CHECKPOINT
    COMPACTION. Create a handoff summary". A title generator's rules about "the message you are
    summarizing" do not ask for one.
    """
    system = [m for m in messages if m.get("role") == "system"][:1]
    user = [m for m in messages if m.get("role") == "user"][-1:]
    return any(_ASKS_FOR_SUMMARY.search(_text_of(m)[:OPENING]) for m in system + user)


#: How much of a message is its opening, where it says what it asks for.
OPENING = 1000
#: What asks for a summary (case aside); the engine's plan looks for the same.
ASKS_FOR_SUMMARY_PATTERN = (
    r"summary of (?:the|this|our) conversation|context summari[sz]ation|summari[sz]e (?:the|this|"
    r"our) conversation|checkpoint compaction|handoff summary"
)
_ASKS_FOR_SUMMARY = re.compile(ASKS_FOR_SUMMARY_PATTERN, re.IGNORECASE)


def count_text_turns(messages: list[dict[str, Any]], scenario: Scenario) -> int:
    """The index of the next turn of text scenario ``scenario``: its turns answered so far.

    Its own answers are told by their text, after the first user message naming the scenario:
    a text harness's turns have no tool calls to tell them by, and it puts messages of its own
    between them (aider's few-shot examples before the task, its "Ok." to the files it adds).
    """
    start = 0
    for index, message in enumerate(messages):
        if message.get("role") == "user" and scenario_named([message]) == scenario.name:
            start = index
            break
    said = {(turn.text or "").strip() for turn in scenario.turns}
    return sum(
        1
        for message in messages[start:]
        if message.get("role") == "assistant" and _text_of(message).strip() in said
    )


def _text_of(message: dict[str, Any]) -> str:
    """A message's text, whether its content is a string or a list of parts (or of strings)."""
    content = message.get("content")
    if isinstance(content, list):
        parts = (p.get("text") if isinstance(p, dict) else p for p in content)
        return "".join(part for part in parts if isinstance(part, str))
    return content if isinstance(content, str) else ""


def count_prompt_turns(prompt: str, assistant_start: str, tool_call_tag: str) -> int:
    """``count_assistant_turns`` for a rendered prompt (the raw-prompt path)."""
    turns = 0
    for turn in prompt.split(assistant_start)[1:-1]:  # the last one is the turn being sampled
        turns = turns + 1 if tool_call_tag in turn else 0
    return turns


def resolve_call(call: ToolCallSpec, offered: list[str]) -> tuple[str, dict[str, Any]]:
    """The concrete tool name and arguments of a scripted call for this request."""
    if call.tool == SHELL:
        for name in offered:
            if name in SHELL_TOOLS:
                return name, SHELL_TOOLS[name](call.arguments)
        raise PolicyError(
            f"the scenario calls the shell tool but the request offers none of "
            f"{', '.join(SHELL_TOOLS)} (offered: {', '.join(offered) or 'no tools'})"
        )
    if call.tool not in offered:
        raise PolicyError(
            f"the scenario calls tool {call.tool!r}, which the request does not offer "
            f"(offered: {', '.join(offered) or 'no tools'})"
        )
    return call.tool, dict(call.arguments)


def turn_calls(turn: Turn, offered: list[str], rng: random.Random) -> list[tuple[str, str]]:
    """The turn's calls as (tool name, arguments as the model writes the JSON).

    The JSON spacing varies as a sampling model's would: sometimes compact, which a chat
    template re-renders differently, so the next prompt need not contain the sampled bytes.
    """
    calls = []
    for call in turn.calls:
        name, arguments = resolve_call(call, offered)
        separators = (",", ":") if rng.random() < 0.25 else (", ", ": ")
        calls.append((name, json.dumps(arguments, ensure_ascii=False, separators=separators)))
    return calls


def turn_text(turn: Turn, offered: list[str], rng: random.Random) -> str:
    """The text the model samples for a turn, tool calls written as Hermes blocks."""
    parts = [turn.text] if turn.text else []
    for name, args in turn_calls(turn, offered, rng):
        parts.append(f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>')
    return "\n".join(parts)


def scripted_tools(scenarios: ScenarioFile) -> list[str]:
    """Every tool name a scenario file's calls may resolve to: the shell tools and named ones."""
    named = [c.tool for s in scenarios.scenarios for t in s.turns for c in t.calls]
    return list(dict.fromkeys([*SHELL_TOOLS, *(n for n in named if n != SHELL)]))
