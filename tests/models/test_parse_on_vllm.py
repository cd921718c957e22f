"""Each family reads a turn as vLLM's own parsers read it, on the tokens vLLM sampled.

The family's ``parse`` decides what a harness gets in exact context (the interceptor parses the
completion it asked for as token ids) and what the reference backend answers; vLLM's tool-call
and reasoning parsers decide what a harness gets from vLLM. Here a real vLLM plays the solve
scenario turn by turn (a text and a call, a call alone, a final answer); each answer's token ids
go through the family's parse, which must give vLLM's content, reasoning and calls exactly —
whitespace included.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from rollstream.dev.engine.families import ENGINE_FAMILIES
from rollstream.models.family import ParsedTurn
from tests.dev.engine.test_plan import BASH, SYSTEM
from tests.engine_servers import EngineServers
from tests.loaded_families import loaded_family

pytestmark = pytest.mark.integration


#: Families whose render differs from vLLM's elsewhere anyway, as tests/models/
#: test_template_parity.py names it: llama-3's date (renderers pins one, the template writes
#: today's), qwen3-coder's tool preamble (renderers' older template's wording).
DIFFERENT = {"llama-3", "qwen3-coder"}
#: Families vLLM renders outside its chat-template layer, which is where the header is dropped:
#: ``--tokenizer-mode mistral`` hands the system prompt to mistral-common as it came.
KEEPS_BILLING_HEADER = {"mistral"}


def _reasoning(message: dict[str, Any]) -> str | None:
    return message.get("reasoning") or message.get("reasoning_content")


def _calls(turn: ParsedTurn | dict[str, Any]) -> list[tuple[str, Any]]:
    if isinstance(turn, ParsedTurn):
        return [(c.name, json.loads(c.arguments)) for c in turn.tool_calls]
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in turn.get("tool_calls") or []
    ]


@pytest.mark.parametrize("family", list(ENGINE_FAMILIES))
def test_the_family_parses_vllms_tokens_as_vllm_does(
    family: str, engine_servers: EngineServers
) -> None:
    server = engine_servers.get(family)
    parser = loaded_family(family)
    messages: list[dict[str, Any]] = [
        SYSTEM,
        {"role": "user", "content": "[scenario=solve] Write polar into hello.txt."},
    ]
    seen: list[tuple[str | None, str | None, list[tuple[str, Any]]]] = []
    for _ in range(3):  # the scenario's three turns
        body: dict[str, Any] = {"model": server.model, "messages": messages, "tools": [BASH]}
        body |= {"return_token_ids": True, "temperature": 1.0}
        answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
        choice = answer["choices"][0]
        message = choice["message"]
        parsed = parser.parse(choice["token_ids"], answer["prompt_token_ids"], [BASH])
        theirs = (message.get("content"), _reasoning(message), _calls(message))
        ours = (parsed.content, parsed.reasoning, _calls(parsed))
        assert ours == theirs, f"turn {len(seen) + 1}: the family read {ours!r}, vLLM {theirs!r}"
        assert parsed.parse_error is None
        seen.append(theirs)
        messages.append({k: v for k, v in message.items() if v is not None})
        for call in message.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "polar\n"})
    # The scenario was played: a call, a call, then the answer.
    assert [bool(calls) for _, _, calls in seen] == [True, True, False]
    assert "polar" in (seen[-1][0] or "")


@pytest.mark.parametrize("family", list(ENGINE_FAMILIES))
def test_claude_codes_system_prompt_renders_as_vllm_renders_it(
    family: str, engine_servers: EngineServers
) -> None:
    """vLLM drops Claude Code's billing header line from a system prompt before its template
    runs (its value changes per request); the family's render must drop it too, or every exact
    call's serve gap starts at the first token (seen: 18,900 of 18,900 tokens a call). In
    mistral mode vLLM keeps it, and so must the family."""
    server = engine_servers.get(family)
    parser = loaded_family(family)
    header = "x-anthropic-billing-header: cc_version=2.1.197.660; cc_entrypoint=sdk-cli;"
    for system in (
        f"{header}\nYou are a Claude agent.",
        [{"type": "text", "text": header}, {"type": "text", "text": "You are a Claude agent."}],
    ):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": "Hi."},
        ]
        # With a tool, as Claude Code always asks: gpt-oss's harmony in vLLM (oss-harmony) and
        # in renderers (openai-harmony) end tool-less developer instructions differently.
        body: dict[str, Any] = {"model": server.model, "messages": messages, "tools": [BASH]}
        body |= {"add_generation_prompt": True}
        theirs = httpx.post(f"{server.url}/tokenize", json=body, timeout=60).json()["tokens"]
        ours = parser.render_ids(messages, [BASH])
        kept = family in KEEPS_BILLING_HEADER
        assert ("billing" in parser.tokenizer.decode(theirs, False)) == kept
        assert ("billing" in parser.tokenizer.decode(ours, False)) == kept
        if family not in DIFFERENT:
            assert ours == theirs
