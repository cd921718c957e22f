"""What the scripted model writes next, read from a rendered prompt: the plan inside vLLM.

The reference backend's scenarios (``ROLLSTREAM_BACKEND_SCENARIOS``) drive vLLM too: the
development side compiles a scenario file into a plan (``compile_plan``, JSON: every turn's
calls resolved for every shell tool a harness may offer) and the engine's logits processor
(processor.py) reads it and, for each request, the prompt vLLM rendered with the published
template. From that text alone it finds the tools offered, how many tool-calling turns came
since the last answer, and which scenario the conversation plays; it then writes the turn in the
family's own raw format (``write_turn``) for vLLM's tokenizer, tool-call and reasoning parsers
to read. Nothing here uses rollstream's families: the formats are this module's own data, so a
family bug in rollstream cannot agree with itself here.

Runs inside the engine's venv (copied beside the processor): the standard library only.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any

#: Names the compiled plan file for the processor inside vLLM.
PLAN_ENV = "ROLLSTREAM_ENGINE_PLAN"

#: How each family's raw output is read from a prompt and written: where an assistant turn
#: starts in the rendered prompt (``assistant``; the prompt before the first one holds the task)
#: and where a user message does (``user``),
#: a past assistant turn (``turn``: a pattern whose group is the turn's text, end token
#: included), what shows that a turn called tools (``called``) and, where a model writes a turn
#: as several messages (harmony's analysis, then a call or a final answer), what shows one
#: answered (``answered``; otherwise any turn without a call did); whether the model thinks
#: first (``<think>…</think>``) and where the tools are declared (``tools_section``: the text
#: between its two markers, looked for before the first assistant turn unless ``tools_anywhere``:
#: Mistral's v3 format declares them before the last user message).
FORMATS: dict[str, dict[str, Any]] = {
    "hermes": {
        "assistant": "<|im_start|>assistant",
        "user": "<|im_start|>user",
        "turn": r"<\|im_start\|>assistant(.*?<\|im_end\|>)",
        "called": "<tool_call>",
        "think": False,
        "tools_section": ("<tools>", "</tools>"),
    },
    "hermes-thinking": {
        "assistant": "<|im_start|>assistant",
        "user": "<|im_start|>user",
        "turn": r"<\|im_start\|>assistant(.*?<\|im_end\|>)",
        "called": "<tool_call>",
        "think": True,
        "tools_section": ("<tools>", "</tools>"),
    },
    "qwen3-coder": {
        "assistant": "<|im_start|>assistant",
        "user": "<|im_start|>user",
        "turn": r"<\|im_start\|>assistant(.*?<\|im_end\|>)",
        "called": "<tool_call>",
        "think": False,
        "tools_section": ("<tools>", "</tools>"),
    },
    "llama3-json": {
        "assistant": "<|start_header_id|>assistant<|end_header_id|>",
        "user": "<|start_header_id|>user<|end_header_id|>",
        "turn": r"<\|start_header_id\|>assistant<\|end_header_id\|>(.*?<\|eot_id\|>)",
        "called": '{"name": ',
        "think": False,
    },
    "harmony": {
        "assistant": "<|start|>assistant",
        "user": "<|start|>user",
        "turn": r"<\|start\|>assistant(.*?(?:<\|end\|>|<\|call\|>|<\|return\|>))",
        "called": "to=functions.",
        "answered": "<|channel|>final",
        "think": False,
        "tools_section": ("namespace functions {", "} // namespace functions"),
    },
    "mistral-v3": {
        "assistant": "[/INST]",
        "user": "[INST]",
        # After the user's [/INST] or the tool results' [/TOOL_RESULTS], up to its </s>.
        "turn": r"(?:\[/INST\]|\[/TOOL_RESULTS\])((?:(?!\[/INST\]|\[/TOOL_RESULTS\]).)*?</s>)",
        "called": "[TOOL_CALLS]",
        "think": False,
        "tools_section": ("[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"),
        "tools_anywhere": True,
    },
}
_NAME_IN_TOOLS = ('"name": "{}"', '"name":"{}"', "<name>{}</name>", "<function={}>", "type {} = ")


def offered(plan: dict[str, Any], prompt: str) -> list[str]:
    """The plan's tool names the prompt declares, in the plan's order of preference.

    Only the declarations are read: the prompt before its first assistant turn (system prompt,
    tools, first user message), and within it the ``<tools>`` section where the template has
    one; a side call without tools whose text quotes an earlier call offers nothing.
    """
    fmt = FORMATS[plan["format"]]
    declared = prompt if fmt.get("tools_anywhere") else prompt.split(fmt["assistant"], 1)[0]
    if fmt.get("tools_section"):
        opening, closing = fmt["tools_section"]
        end = declared.rfind(closing)
        declared = declared[declared.rfind(opening, 0, end) : end] if end >= 0 else ""
    return [
        name
        for name in plan["tools"]
        if any(pattern.format(name) in declared for pattern in _NAME_IN_TOOLS)
    ]


def turn_index(prompt: str, fmt: dict[str, Any], summary: str | None = None) -> int:
    """Tool-calling assistant turns since the last one that answered without calling.

    After a summary the plan wrote (``summary``: its pattern), the turns it says were done and
    those since: a compacted history holds no earlier turns.
    """
    turns = 0
    marks = list(re.finditer(summary, prompt)) if summary else []
    if marks:
        turns, prompt = int(marks[-1].group(2)), prompt[marks[-1].end() :]
    for turn in re.findall(fmt["turn"], prompt, re.DOTALL):  # ended turns only
        if fmt["called"] in turn:
            turns += 1
        elif fmt.get("answered", "") in turn:  # "" is in every turn
            turns = 0
    return turns


def choose(plan: dict[str, Any], prompt: str, fmt: dict[str, Any]) -> dict[str, Any]:
    """The scenario the conversation plays: named in it (:func:`named_scenario`) or drawn.

    The draw is seeded by the plan's seed and the prompt before its first assistant turn (the
    system prompt, the tools and the task), so every call of a session plays the same scenario;
    sessions whose prompts differ (another task, another workspace) draw again.
    """
    found = named_scenario(plan, prompt)
    if found is not None:
        return found
    head = prompt.split(fmt["assistant"], 1)[0]
    digest = hashlib.sha256(f"{plan['seed']}:{head}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "little"))
    scenarios: list[dict[str, Any]] = plan["scenarios"]
    return rng.choices(scenarios, weights=[s["weight"] for s in scenarios])[0]


def named_scenario(plan: dict[str, Any], prompt: str) -> dict[str, Any] | None:
    """The scenario the prompt names (``[scenario=NAME]``), or its last summary names."""
    by_name = {s["name"]: s for s in plan["scenarios"]}
    named = re.search(r"\[scenario=([\w.-]+)\]", prompt)
    if named and named.group(1) in by_name:
        found: dict[str, Any] = by_name[named.group(1)]
        return found
    marks = re.findall(plan["summary"]["pattern"], prompt)
    return by_name.get(marks[-1][0]) if marks else None


def answer(plan: dict[str, Any], prompt: str) -> str:
    """The raw text the model writes after ``prompt`` (end-of-turn token not included)."""
    fmt = FORMATS[plan["format"]]
    summary = _summary(plan, prompt, fmt)
    if summary is not None:
        return summary
    tools = offered(plan, prompt)
    if not tools:
        return _untooled(plan, prompt, fmt)
    scenario = choose(plan, prompt, fmt)
    index = turn_index(prompt, fmt, plan["summary"]["pattern"])
    if index >= len(scenario["turns"]):
        return write_turn(plan["format"], scenario["final_reasoning"], scenario["final_text"], [])
    turn = scenario["turns"][index]
    calls = []
    for call in turn["calls"]:
        name = next((t for t in tools if t in call["by_tool"]), None)
        if name is None:  # the harness offers none of the tools the turn calls: say so
            wanted = ", ".join(call["by_tool"])
            return write_turn(plan["format"], "", f"[plan: none of {wanted} is offered]", [])
        calls.append((name, call["by_tool"][name]))
    return write_turn(plan["format"], turn["reasoning"], turn["text"], calls)


def _summary(plan: dict[str, Any], prompt: str, fmt: dict[str, Any]) -> str | None:
    """The summary of a scenario's thread, where a harness compacting its context asks for one.

    Asked for near the start of the system prompt or of the last user message (tools offered
    or not: Claude Code offers them); the turns done are counted, or, where the history is
    written out as text (opencode), read from the commands it mentions.
    """
    spec = plan["summary"]
    opening = spec["opening"]
    last_user = prompt.rfind(fmt["user"])
    asked = [
        prompt[: 2 * opening],
        prompt[last_user : last_user + opening] if last_user >= 0 else "",
    ]
    if not any(re.search(spec["asks"], part, re.IGNORECASE) for part in asked):
        return None
    scenario = named_scenario(plan, prompt)
    if scenario is None:
        return None
    done = turn_index(prompt, fmt, spec["pattern"])
    if not done:
        for turn in scenario["turns"]:
            commands = turn.get("commands") or []
            if not commands or not all(c and c in prompt for c in commands):
                break
            done += 1
    text = spec["template"].format(name=scenario["name"], turns=done)
    return write_turn(plan["format"], plan["side_reasoning"], text, [])


def _untooled(plan: dict[str, Any], prompt: str, fmt: dict[str, Any]) -> str:
    """The answer to a prompt without tools: a text scenario's turn, or the side-call text.

    A text scenario (for a harness that offers no tools, e.g. aider) counts its own past turns
    after the place the prompt names it, told by their text: the harness puts turns of its own
    between them (aider's few-shot examples, its "Ok." to the files it adds).
    """
    scenario = choose(plan, prompt, fmt)
    if scenario.get("protocol") != "text":
        return write_turn(plan["format"], plan["side_reasoning"], plan["side_call_text"], [])
    named = re.search(r"\[scenario=([\w.-]+)\]", prompt)
    after = prompt[named.end() :] if named else prompt
    said = [turn["text"].strip() for turn in scenario["turns"]]
    past = re.findall(fmt["turn"], after, re.DOTALL)
    index = sum(1 for turn in past if any(text and text in turn for text in said))
    if index >= len(scenario["turns"]):
        return write_turn(plan["format"], scenario["final_reasoning"], scenario["final_text"], [])
    turn = scenario["turns"][index]
    return write_turn(plan["format"], turn["reasoning"], turn["text"], [])


def write_turn(
    format_name: str, reasoning: str, text: str, calls: list[tuple[str, dict[str, Any]]]
) -> str:
    """One assistant turn as the family's model writes it."""
    parts = []
    if FORMATS[format_name]["think"]:
        parts.append(f"<think>\n{reasoning}\n</think>\n\n")
    if format_name in ("hermes", "hermes-thinking"):
        body = [text] if text else []
        body += [
            "<tool_call>\n"
            + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
            + "\n</tool_call>"
            for name, args in calls
        ]
        parts.append("\n".join(body))
    elif format_name == "qwen3-coder":
        body = [text] if text else []
        for name, args in calls:
            params = "".join(
                f"<parameter={key}>\n{_coder_value(value)}\n</parameter>\n"
                for key, value in args.items()
            )
            body.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
        parts.append("\n".join(body))
    elif format_name == "llama3-json":
        # Llama 3.1 calls one tool per turn, the whole turn being the call's JSON.
        if calls:
            name, args = calls[0]
            parts.append(json.dumps({"name": name, "parameters": args}, ensure_ascii=False))
        else:
            parts.append(text)
    elif format_name == "harmony":
        parts.append(_harmony_turn(reasoning, text, calls))
    elif format_name == "mistral-v3":
        # Calls alone: mistral-common has no turn with text beside calls (vLLM would serve one,
        # then refuse it with a 400 when the harness sends it back).
        listed = [{"name": name, "arguments": args} for name, args in calls]
        parts.append(f"[TOOL_CALLS]{json.dumps(listed, ensure_ascii=False)}" if listed else text)
    else:
        raise ValueError(f"unknown format {format_name!r}")
    return "".join(parts)


def _harmony_turn(reasoning: str, text: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """gpt-oss's turn: its analysis, then one call (harmony stops at ``<|call|>``) or the answer.

    The end-of-turn token the processor adds is ``<|return|>``; a call ends with ``<|call|>``,
    a stop token of its own, so the processor's is never reached. A turn's text beside a call
    is not written (gpt-oss would write it as a commentary preamble).
    """
    head = (
        f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant" if reasoning else ""
    )
    if calls:
        name, args = calls[0]
        body = json.dumps(args, ensure_ascii=False)
        header = f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"
        return f"{head}{header}{body}<|call|>"
    return f"{head}<|channel|>final<|message|>{text}"


def _coder_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
