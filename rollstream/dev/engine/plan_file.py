"""A scenario file compiled into the plan the engine's logits processor plays (plan.py).

The scenarios are the reference backend's (one file drives either): validated by its own
models, each call's arguments resolved for every shell tool a harness may offer (the harness
decides which one at run time) and each turn's reasoning written, so the processor needs
nothing but JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollstream.dev.backend.policies.scenarios import (
    ASKS_FOR_SUMMARY_PATTERN,
    OPENING,
    SHELL,
    SHELL_TOOLS,
    SUMMARY_PATTERN,
    SUMMARY_TEMPLATE,
    ScenarioFile,
    ToolCallSpec,
    Turn,
    scripted_tools,
)
from rollstream.dev.backend.policies.scripted import reasoning_for
from rollstream.dev.engine.plan import FORMATS


def _by_tool(call: ToolCallSpec) -> dict[str, dict[str, Any]]:
    if call.tool == SHELL:
        return {name: resolve(call.arguments) for name, resolve in SHELL_TOOLS.items()}
    return {call.tool: dict(call.arguments)}


def _turn(turn: Turn) -> dict[str, Any]:
    return {
        "text": turn.text or "",
        "reasoning": reasoning_for(turn, True),
        "calls": [{"by_tool": _by_tool(call)} for call in turn.calls],
        # What shows the turn ran in a history written out as text (a summary's request).
        "commands": [str(call.arguments.get("command", "")) for call in turn.calls],
    }


def compile_plan(
    scenarios: ScenarioFile, format_name: str, eos: str, seed: int = 0
) -> dict[str, Any]:
    """The plan of ``scenarios`` written in ``format_name`` (a key of plan.FORMATS).

    ``eos`` is the token that ends the family's assistant turn, written after the plan's text.
    """
    if format_name not in FORMATS:
        raise ValueError(f"unknown format {format_name!r}; known: {', '.join(FORMATS)}")
    return {
        "format": format_name,
        "eos": eos,
        "seed": seed,
        "tools": scripted_tools(scenarios),
        "side_call_text": scenarios.side_call_text,
        "side_reasoning": reasoning_for(None, False),
        "summary": {
            "template": SUMMARY_TEMPLATE,
            "pattern": SUMMARY_PATTERN,
            "asks": ASKS_FOR_SUMMARY_PATTERN,
            "opening": OPENING,
        },
        "scenarios": [
            {
                "name": scenario.name,
                "weight": scenario.weight,
                "protocol": scenario.protocol,
                "final_text": scenario.final_text,
                "final_reasoning": reasoning_for(None, True),
                "turns": [_turn(turn) for turn in scenario.turns],
            }
            for scenario in scenarios.scenarios
        ],
    }


def write_plan(plan: dict[str, Any], path: Path) -> Path:
    """Write ``plan`` as JSON (what the processor reads from ``ROLLSTREAM_ENGINE_PLAN``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan, ensure_ascii=False, indent=1))
    return path
