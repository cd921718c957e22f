"""The backend serving model families: prompts rendered, answers written and parsed natively.

Qwen3 (thinking on: ``<think>`` reasoning, Hermes JSON calls) and Qwen3-Coder (XML
``<function=...>`` calls), on their real vocabularies, through the real aiohttp server with the
scripted policy; the generic family's behaviour is what the other backend tests show.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from rollstream.dev.backend.policies.scenarios import SHELL_TOOLS, count_assistant_turns
from rollstream.dev.backend.prompt_reader import PromptReader, probe_tool
from rollstream.dev.backend.server import Backend, served_family
from rollstream.dev.backend.settings import BackendSettings
from rollstream.errors import ConfigurationError
from rollstream.models.families import FAMILIES
from rollstream.models.family import AnsweredTurn, Family
from rollstream.models.template_family import TemplateFamily
from tests.dev.backend.conftest import SHELL_TOOL, BackendFactory
from tests.loaded_families import loaded_family

MODEL = "rollstream-tiny"
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Create hello.txt containing polar."}]
AUTH = {"Authorization": "Bearer sess-9@solve"}
FAMILY_NAMES = ["qwen3", "qwen3-coder"]
#: How each family writes a tool call, as the sampled ids decode.
NATIVE = {
    "qwen3": ["<think>", "</think>", "<tool_call>", '"name": "bash"'],
    "qwen3-coder": ["<tool_call>", "<function=bash>", "<parameter=command>"],
}


def _family(name: str) -> Family:
    """A family, loaded once for the whole run (a real vocabulary takes seconds)."""
    return loaded_family(name)


@pytest.fixture(params=FAMILY_NAMES)
def family(request: pytest.FixtureRequest) -> Family:
    """Each family under test."""
    return _family(request.param)


async def _client(
    factory: BackendFactory, family: Family, scenario_file: Path
) -> TestClient[Any, Any]:
    return await factory(family=family, policy="scripted", scenarios=scenario_file)


def _chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": messages,
        "tools": [SHELL_TOOL],
        "return_token_ids": True,
        "seed": 5,
    } | extra


async def _post(client: TestClient[Any, Any], path: str, body: dict[str, Any]) -> Any:
    response = await client.post(path, json=body, headers=AUTH)
    assert response.status == 200, await response.text()
    return await response.json()


async def _stream(client: TestClient[Any, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert response.status == 200
    blocks = [b[len("data: ") :] for b in (await response.text()).split("\n\n") if b]
    assert blocks[-1] == "[DONE]"
    return [json.loads(b) for b in blocks[:-1]]


def _accumulate(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client assembles from the deltas: texts joined, tool calls merged by index."""
    out: dict[str, Any] = {"content": "", "reasoning_content": "", "reasoning": "", "ids": []}
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            for key in ("content", "reasoning_content", "reasoning"):
                out[key] += delta.get(key) or ""
            for part in delta.get("tool_calls", []):
                call = calls.setdefault(part["index"], {"name": "", "arguments": ""})
                call["name"] += part.get("function", {}).get("name") or ""
                call["arguments"] += part.get("function", {}).get("arguments") or ""
            out["ids"] += choice.get("token_ids") or []
            out["finish_reason"] = choice["finish_reason"] or out.get("finish_reason")
    out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


def _calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ]


async def test_a_chat_answer_is_written_and_parsed_in_the_family_format(
    backend_factory: BackendFactory, family: Family, scenario_file: Path
) -> None:
    client = await _client(backend_factory, family, scenario_file)
    data = await _post(client, "/v1/chat/completions", _chat(MESSAGES))
    [choice] = data["choices"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert _calls(message) == [("bash", {"command": "echo polar > hello.txt"})]
    assert message["content"].strip() == "Let me look."
    if family.thinks:
        assert "reasoning_content" not in message  # vLLM 0.32 writes `reasoning` only
        assert "echo polar > hello.txt" in message["reasoning"]
    else:
        assert "reasoning" not in message and "reasoning_content" not in message
    # The prompt as the family renders it; the completion in the family's native syntax.
    assert data["prompt_token_ids"] == family.render_ids(MESSAGES, [SHELL_TOOL])
    tokenized = await _post(client, "/tokenize", {"messages": MESSAGES, "tools": [SHELL_TOOL]})
    assert tokenized["tokens"] == data["prompt_token_ids"]
    raw = family.tokenizer.decode(choice["token_ids"], False)
    assert all(marker in raw for marker in NATIVE[family.name]), raw
    assert choice["token_ids"][-1] in family.stop_ids
    assert data["usage"]["completion_tokens"] == len(choice["token_ids"])


async def test_streamed_answers_match_whole_ones(
    backend_factory: BackendFactory, family: Family, scenario_file: Path
) -> None:
    client = await _client(backend_factory, family, scenario_file)
    whole = await _post(client, "/v1/chat/completions", _chat(MESSAGES))
    message = whole["choices"][0]["message"]
    chunks = await _stream(client, _chat(MESSAGES, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    streamed = _accumulate(chunks)
    assert streamed["ids"] == whole["choices"][0]["token_ids"]
    assert streamed["finish_reason"] == "tool_calls"
    assert streamed["content"] == message["content"]
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed["tool_calls"]] == _calls(
        message
    )
    reasoning = message.get("reasoning") or ""
    assert streamed["reasoning"] == reasoning and not streamed["reasoning_content"]
    assert bool(reasoning) == family.thinks


async def test_a_token_id_prompt_gets_the_chat_answer(
    backend_factory: BackendFactory, family: Family, scenario_file: Path
) -> None:
    """``/v1/completions`` (exact context's path) finds the tools and turn in the ids alone."""
    client = await _client(backend_factory, family, scenario_file)
    chat = await _post(client, "/v1/chat/completions", _chat(MESSAGES))
    prompt = family.render_ids(MESSAGES, [SHELL_TOOL])
    # max_tokens null: the rest of the context, as the interceptor asks.
    body = {"model": MODEL, "prompt": prompt, "return_token_ids": True, "seed": 5}
    body["max_tokens"] = None
    raw = await _post(client, "/v1/completions", body)
    [choice] = raw["choices"]
    assert choice["token_ids"] == chat["choices"][0]["token_ids"]
    assert choice["finish_reason"] == "stop"
    # The next turn: the sampled turn continued with the tool's result, as exact context sends
    # it (the sampled tokens kept), gives the scenario's second turn: two calls at once.
    message = chat["choices"][0]["message"]
    answer = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
    if message.get("reasoning"):
        answer["reasoning_content"] = message["reasoning"]
    turn = AnsweredTurn(MESSAGES, [SHELL_TOOL], answer, prompt, choice["token_ids"])
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": "done"} for c in message["tool_calls"]
    ]
    following = family.continue_turn(turn, results).prompt_ids
    second = await _post(client, "/v1/completions", body | {"prompt": following})
    parsed = family.parse(second["choices"][0]["token_ids"], following, [SHELL_TOOL])
    second_calls = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
    assert second_calls == [("bash", {"command": "cat hello.txt"}), ("bash", {"command": "ls"})]
    # The Chat path agrees for the same conversation.
    followed = await _post(client, "/v1/chat/completions", _chat([*MESSAGES, answer, *results]))
    assert _calls(followed["choices"][0]["message"]) == second_calls


async def test_an_unparseable_call_reaches_the_caller_as_content(
    backend_factory: BackendFactory, family: Family, tmp_path: Path
) -> None:
    path = tmp_path / "broken.yaml"
    broken = 'Trying.\\n<tool_call>\\n{\\"name\\": \\"bash\\", \\"arguments\\": {\\"command\\": }'
    path.write_text(f'scenarios: [{{name: solve, turns: [{{text: "{broken}\\n</tool_call>"}}]}}]')
    client = await backend_factory(family=family, policy="scripted", scenarios=path)
    data = await _post(client, "/v1/chat/completions", _chat(MESSAGES))
    [choice] = data["choices"]
    assert "<tool_call>" in family.tokenizer.decode(choice["token_ids"], False)
    assert choice["finish_reason"] == "stop" and choice["message"]["tool_calls"] == []
    assert '{"command": }' in choice["message"]["content"]
    streamed = _accumulate(await _stream(client, _chat(MESSAGES, stream=True)))
    assert streamed["content"] == choice["message"]["content"]
    assert streamed["tool_calls"] == [] and streamed["finish_reason"] == "stop"


async def test_a_side_call_without_tools_still_splits_reasoning(
    backend_factory: BackendFactory, scenario_file: Path
) -> None:
    client = await _client(backend_factory, _family("qwen3"), scenario_file)
    body = {"model": MODEL, "messages": MESSAGES, "return_token_ids": True}
    message = (await _post(client, "/v1/chat/completions", body))["choices"][0]["message"]
    # As vLLM's qwen3 parser gives it: the text after </think>, its newlines included.
    assert message["content"] == "\n\nSide answer." and message["tool_calls"] == []
    assert message["reasoning"] and "reasoning_content" not in message


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "go"}],
        [
            {"role": "user", "content": "context"},
            {"role": "assistant", "content": "Got it."},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": ["exec_command"]},
            {"role": "tool", "content": "ok"},
            {"role": "user", "content": "a reminder between tool turns"},
            {"role": "assistant", "content": "Next.", "tool_calls": ["exec_command", "bash"]},
            {"role": "tool", "content": "ok"},
            {"role": "tool", "content": "ok"},
        ],
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": ["bash"]},
            {"role": "tool", "content": "ok"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "again"},
        ],
    ],
)
def test_a_raw_prompt_tells_its_tools_and_turn(
    family: Family, messages: list[dict[str, Any]]
) -> None:
    """What the scripted policy reads from token ids equals what it reads from messages."""
    conversation: list[dict[str, Any]] = []
    for message in messages:
        names = message.get("tool_calls")
        if names:
            message = message | {
                "tool_calls": [
                    {
                        "id": family.call_id(name, i),
                        "type": "function",
                        "function": {"name": name, "arguments": '{"command": "ls"}'},
                    }
                    for i, name in enumerate(names)
                ]
            }
        conversation.append(message)
    tools = [probe_tool(name) for name in ("read_file", "exec_command", "bash")]
    prompt = family.render_ids(conversation, tools)
    reader = PromptReader(family, [*SHELL_TOOLS, "read_file"])
    assert reader.offered(prompt) == ["read_file", "exec_command", "bash"]
    assert reader.turn_index(prompt) == count_assistant_turns(conversation)


def test_the_settings_choose_the_family() -> None:
    assert isinstance(served_family(BackendSettings()), TemplateFamily)
    assert isinstance(served_family(BackendSettings(family="generic")), TemplateFamily)
    with pytest.raises(ConfigurationError, match=r"known: .*qwen3-coder.*generic"):
        served_family(BackendSettings(family="qwen9"))
    backend = Backend(BackendSettings(policy="scripted"), family=_family("qwen3-coder"))
    assert backend.family.name == "qwen3-coder" and backend.tokenizer is backend.family.tokenizer


def test_split_tokens_spell_the_same_text_and_never_split_a_marker(
    family: Family, scenario_file: Path
) -> None:
    from rollstream.dev.backend.policies.base import GenerationRequest
    from rollstream.dev.backend.policies.scenarios import load_scenarios
    from rollstream.dev.backend.policies.scripted import ScriptedPolicy

    prompt = family.render_ids(MESSAGES, [SHELL_TOOL])
    request = GenerationRequest(prompt, 500, MESSAGES, [SHELL_TOOL], session="s@solve")
    scenarios = load_scenarios(scenario_file)
    whole, split = (
        ScriptedPolicy(family.tokenizer, scenarios, split_rate=rate, family=family).start(request)
        for rate in (0.0, 1.0)
    )
    assert len(split.tokens) > len(whole.tokens)  # some tokens came as two
    text = family.tokenizer.decode
    assert text(split.tokens, False) == text(whole.tokens, False)
    added = set(family.tokenizer.hf.added_tokens_decoder)  # <tool_call>, <think>, <|im_end|>...
    markers = [t for t in whole.tokens if t in added]
    assert markers and [t for t in split.tokens if t in added] == markers
    assert whole.tokens[-1] in family.stop_ids and split.tokens[-1] == whole.tokens[-1]
    parsed = family.parse(split.tokens, prompt, [SHELL_TOOL])
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("bash", {"command": "echo polar > hello.txt"})
    ]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_s_raw_prompt_tells_its_turn(name: str) -> None:
    """Turn after turn of tool calls, read back from token ids alone (Mistral writes no
    assistant header: its turns start after [/INST] or [/TOOL_RESULTS])."""
    family = _family(name)
    reader = PromptReader(family, [*SHELL_TOOLS, "read_file"])
    tools = [probe_tool("bash")]
    conversation: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in range(3):
        assert reader.turn_index(family.render_ids(conversation, tools)) == turn
        call_id = family.call_id("bash", turn)
        conversation += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "name": "bash", "content": "ok"},
        ]


async def test_tool_call_ids_are_unique_across_the_conversation(
    backend_factory: BackendFactory, scenario_file: Path
) -> None:
    """Kimi's ids name the call's number in the conversation (functions.NAME:N): the same id on
    every turn made Claude Code take a new call for one already answered, for ever."""
    client = await _client(backend_factory, _family("kimi-k2"), scenario_file)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    seen: list[str] = []
    for _ in range(2):
        message = (await _post(client, "/v1/chat/completions", _chat(messages)))["choices"][0][
            "message"
        ]
        ids = [call["id"] for call in message["tool_calls"]]
        assert all(i.startswith("functions.bash:") for i in ids)
        seen += ids
        messages += [
            {
                "role": "assistant",
                "content": message["content"],
                "tool_calls": message["tool_calls"],
            },
            *({"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids),
        ]
    assert len(seen) == 3 and len(set(seen)) == 3
