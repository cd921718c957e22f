"""The backend over real HTTP on 127.0.0.1: vLLM's fields, field by field, and its errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from rollstream.dev.backend.policies.base import (
    Generation,
    GenerationFailed,
    GenerationRequest,
    Sample,
)
from rollstream.models.tokenizer import ChatTokenizer
from tests.dev.backend.conftest import SHELL_TOOL, BackendFactory

MODEL = "rollstream-tiny"
MESSAGES = [{"role": "user", "content": "Create hello.txt containing polar."}]
AUTH = {"Authorization": "Bearer sess-1@solve"}


async def _scripted(factory: BackendFactory, scenario_file: Path) -> TestClient[Any, Any]:
    return await factory(policy="scripted", scenarios=scenario_file)


async def _sse(client: TestClient[Any, Any], path: str, body: dict[str, Any]) -> list[Any]:
    response = await client.post(path, json=body, headers=AUTH)
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in (await response.text()).split("\n\n"):
        if block:
            assert block.startswith("data: ")
            payload = block[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


async def test_chat_with_tool_calls_and_token_ids(
    backend_factory: BackendFactory, scenario_file: Path, tokenizer: ChatTokenizer
) -> None:
    client = await _scripted(backend_factory, scenario_file)
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": [SHELL_TOOL],
        "return_token_ids": True,
        "logprobs": True,
        "top_logprobs": 2,
    }
    response = await client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert response.status == 200
    data = await response.json()
    assert data["object"] == "chat.completion" and data["model"] == MODEL
    [choice] = data["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["stop_reason"] is None
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] == "Let me look.\n"
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "echo polar > hello.txt"}
    # Token ids: the prompt as the server rendered it, the completion as sampled (raw text).
    tokenized = await (
        await client.post(
            "/tokenize", json={"model": MODEL, "messages": MESSAGES, "tools": [SHELL_TOOL]}
        )
    ).json()
    assert data["prompt_token_ids"] == tokenized["tokens"]
    raw = tokenizer.decode(choice["token_ids"])
    assert raw.startswith("Let me look.\n<tool_call>") and raw.endswith("</tool_call>")
    assert choice["token_ids"][-1] == tokenizer.eos_id
    content = choice["logprobs"]["content"]
    assert len(content) == len(choice["token_ids"])
    for entry, token_id in zip(content, choice["token_ids"], strict=True):
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["token"] == tokenizer.token_text(token_id)
        assert entry["bytes"] == list(entry["token"].encode())
        assert len(entry["top_logprobs"]) == 2
    assert data["usage"] == {
        "prompt_tokens": len(data["prompt_token_ids"]),
        "completion_tokens": len(choice["token_ids"]),
        "total_tokens": len(data["prompt_token_ids"]) + len(choice["token_ids"]),
        "prompt_tokens_details": None,
    }


async def test_without_return_token_ids_there_are_none(
    backend_factory: BackendFactory, scenario_file: Path
) -> None:
    client = await _scripted(backend_factory, scenario_file)
    response = await client.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES}, headers=AUTH
    )
    data = await response.json()
    assert "prompt_token_ids" not in data and "token_ids" not in data["choices"][0]
    assert data["choices"][0]["logprobs"] is None
    assert data["choices"][0]["message"]["content"] == "Side answer."  # no tools: a side call


async def test_stream_chunk_shapes_field_by_field(
    backend_factory: BackendFactory, scenario_file: Path, tokenizer: ChatTokenizer
) -> None:
    client = await _scripted(backend_factory, scenario_file)
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "tools": [SHELL_TOOL],
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "logprobs": True,
    }
    events = await _sse(client, "/v1/chat/completions", body)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    first, *middle, final, usage = chunks
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    # First chunk: the role, and the prompt ids (only here).
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["token_ids"] == []
    assert isinstance(first["prompt_token_ids"], list) and first["prompt_token_ids"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    # Token chunks: one sampled token each, its logprob beside it.
    for chunk in middle:
        [choice] = chunk["choices"]
        assert choice["finish_reason"] is None
        assert len(choice["token_ids"]) == 1
        assert len(choice["logprobs"]["content"]) == 1
    streamed_ids = [t for c in middle for t in c["choices"][0]["token_ids"]]
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in middle)
    calls = [d for c in middle for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert content == "Let me look.\n"
    assert calls[0]["function"] == {"name": "bash", "arguments": ""} and calls[0]["id"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"command": "echo polar > hello.txt"}
    assert tokenizer.decode(streamed_ids).startswith("Let me look.\n<tool_call>")
    assert streamed_ids[-1] == tokenizer.eos_id
    # Final chunk: the finish reason; then usage with no choices.
    assert final["choices"][0]["finish_reason"] == "tool_calls"
    assert final["choices"][0]["stop_reason"] is None
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == len(streamed_ids)
    assert usage["usage"]["prompt_tokens"] == len(first["prompt_token_ids"])


async def test_stream_and_non_stream_agree(
    backend_factory: BackendFactory, scenario_file: Path
) -> None:
    """Same session and conversation: same scripted tokens whether streamed or not."""
    client = await _scripted(backend_factory, scenario_file)
    body = {"model": MODEL, "messages": MESSAGES, "tools": [SHELL_TOOL], "return_token_ids": True}
    whole = await (await client.post("/v1/chat/completions", json=body, headers=AUTH)).json()
    events = await _sse(client, "/v1/chat/completions", body | {"stream": True})
    streamed = [t for c in events[1:-1] for t in c["choices"][0].get("token_ids", [])]
    assert streamed == whole["choices"][0]["token_ids"]
    assert events[0]["prompt_token_ids"] == whole["prompt_token_ids"]


async def test_completions_with_token_ids_and_text(
    backend_factory: BackendFactory, tokenizer: ChatTokenizer
) -> None:
    client = await backend_factory()
    prompt = tokenizer.encode(tokenizer.render(MESSAGES))
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": 8,
        "return_token_ids": True,
        "logprobs": 2,
        "seed": 1,
    }
    data = await (await client.post("/v1/completions", json=body)).json()
    assert data["object"] == "text_completion"
    [choice] = data["choices"]
    assert choice["prompt_token_ids"] == prompt
    assert 1 <= len(choice["token_ids"]) <= 8
    assert choice["text"] == tokenizer.decode(choice["token_ids"])
    assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"])
    assert all(len(t) <= 2 for t in choice["logprobs"]["top_logprobs"])
    # The same prompt as text gives the same ids with the same seed.
    text_body = body | {"prompt": tokenizer.decode(prompt, skip_special_tokens=False)}
    same = await (await client.post("/v1/completions", json=text_body)).json()
    assert same["choices"][0]["prompt_token_ids"] == prompt
    assert same["choices"][0]["token_ids"] == choice["token_ids"]


async def test_completions_stream(
    backend_factory: BackendFactory, tokenizer: ChatTokenizer
) -> None:
    client = await backend_factory()
    prompt = tokenizer.encode("hello world")
    body = {
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": 6,
        "stream": True,
        "return_token_ids": True,
        "temperature": 0,
    }
    events = await _sse(client, "/v1/completions", body)
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["prompt_token_ids"] == prompt
    ids = [t for c in chunks for t in c["choices"][0]["token_ids"]]
    assert len(ids) == 6
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["text"] for c in chunks) == tokenizer.decode(ids)


async def test_models_health_tokenize_detokenize(backend_factory: BackendFactory) -> None:
    client = await backend_factory(max_model_len=4096)
    assert (await client.get("/health")).status == 200
    models = await (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == MODEL and models["data"][0]["max_model_len"] == 4096
    tokens = await (await client.post("/tokenize", json={"model": MODEL, "prompt": "hello"})).json()
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == 4096
    text = await (await client.post("/detokenize", json={"tokens": tokens["tokens"]})).json()
    assert text == {"prompt": "hello"}


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ("{not json", 400, "malformed JSON"),
        ("[1, 2]", 400, "JSON object"),
        ({"model": "gpt-9", "messages": MESSAGES}, 404, "The model `gpt-9` does not exist"),
        ({"model": MODEL, "messages": []}, 400, "messages"),
        ({"model": MODEL, "messages": MESSAGES, "n": 2}, 400, "n=1"),
        (
            {"model": MODEL, "messages": MESSAGES, "max_tokens": 5000},
            400,
            "max_tokens=5000 cannot be greater than max_model_len=4096",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "x " * 5000}]},
            400,
            "maximum context length is 4096 tokens. However, your prompt contains",
        ),
        ({"model": MODEL, "messages": MESSAGES, "temperature": -1}, 400, "temperature"),
    ],
)
async def test_bad_requests_get_openai_errors_and_the_server_stays_up(
    backend_factory: BackendFactory, body: Any, status: int, fragment: str
) -> None:
    client = await backend_factory(max_model_len=4096)
    data = body if isinstance(body, str) else json.dumps(body)
    response = await client.post(
        "/v1/chat/completions", data=data, headers={"Content-Type": "application/json"}
    )
    assert response.status == status
    error = (await response.json())["error"]
    assert fragment in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (await client.get("/health")).status == 200


@pytest.mark.parametrize(
    ("key", "fragment"),
    [("s@no-such", "unknown scenario 'no-such'"), ("s@needs-editor", "str_replace_editor")],
)
async def test_scenario_problems_are_400s(
    backend_factory: BackendFactory, scenario_file: Path, key: str, fragment: str
) -> None:
    client = await _scripted(backend_factory, scenario_file)
    response = await client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "tools": [SHELL_TOOL]},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status == 400
    assert fragment in (await response.json())["error"]["message"]


async def test_completion_ids_outside_the_vocabulary(backend_factory: BackendFactory) -> None:
    client = await backend_factory()
    response = await client.post("/v1/completions", json={"model": MODEL, "prompt": [1, 10**7]})
    assert response.status == 400
    assert "out of the vocabulary" in (await response.json())["error"]["message"]


async def test_another_tokenizer_folder_is_served_with_its_own_template(
    backend_factory: BackendFactory, other_tokenizer: ChatTokenizer
) -> None:
    client = await backend_factory(tok=other_tokenizer)
    body = {"model": MODEL, "messages": MESSAGES, "return_token_ids": True, "max_tokens": 5}
    data = await (await client.post("/v1/chat/completions", json=body)).json()
    expected = other_tokenizer.encode(other_tokenizer.render(MESSAGES))
    assert data["prompt_token_ids"] == expected
    assert all(t < other_tokenizer.vocab_size for t in data["choices"][0]["token_ids"])


async def test_next_prompt_extends_the_sampled_tokens_only_without_drift(
    backend_factory: BackendFactory, tokenizer: ChatTokenizer, tmp_path: Path
) -> None:
    """What reconstruction depends on: with canonical JSON and canonical tokens, the next
    prompt starts with prompt + sampled completion; compact JSON or split tokens break that,
    because the template re-renders the call from parsed JSON."""
    from rollstream.dev.backend.policies.scenarios import load_scenarios
    from rollstream.dev.backend.policies.scripted import ScriptedPolicy

    path = tmp_path / "s.yaml"
    path.write_text(
        "scenarios: [{name: one, turns: [{tool_call: {tool: shell, arguments: {command: ls}}},"
        " {text: Done.}]}]"
    )
    outcomes = {}
    for split_rate in (0.0, 1.0):
        policy = ScriptedPolicy(tokenizer, load_scenarios(path), split_rate=split_rate)
        client = await backend_factory(instance=policy)
        for i in range(12):
            headers = {"Authorization": f"Bearer s{i}"}
            body: dict[str, Any] = {
                "model": MODEL,
                "messages": MESSAGES,
                "tools": [SHELL_TOOL],
                "return_token_ids": True,
            }
            first = await (
                await client.post("/v1/chat/completions", json=body, headers=headers)
            ).json()
            message = first["choices"][0]["message"]
            call = message["tool_calls"][0]
            follow = [
                *MESSAGES,
                {
                    "role": "assistant",
                    "content": message["content"],
                    "tool_calls": message["tool_calls"],
                },
                {"role": "tool", "tool_call_id": call["id"], "content": "hello.txt"},
            ]
            second = await (
                await client.post(
                    "/v1/chat/completions", json=body | {"messages": follow}, headers=headers
                )
            ).json()
            context = first["prompt_token_ids"] + first["choices"][0]["token_ids"]
            extends = second["prompt_token_ids"][: len(context)] == context
            sampled = tokenizer.decode(first["choices"][0]["token_ids"])
            canonical = '"arguments": {"command": "ls"}' in sampled
            outcomes[(split_rate, i)] = (extends, canonical)
    # No splits: extension exactly when the sampled JSON was in the template's own form.
    for i in range(12):
        extends, canonical = outcomes[(0.0, i)]
        assert extends == canonical
    assert {outcomes[(0.0, i)][1] for i in range(12)} == {True, False}  # both occur
    # Every token split: the ids never match the re-tokenized prompt.
    assert not any(outcomes[(1.0, i)][0] for i in range(12))


@dataclass
class _Failing:
    """Samples ``left`` tokens, then fails as an engine does (GenerationFailed)."""

    token: int
    left: int = 2

    def next_token(self) -> Sample:
        if self.left == 0:
            raise GenerationFailed("Internal server error")
        self.left -= 1
        return Sample(self.token, -0.5)


@dataclass
class _FailingPolicy:
    token: int
    name: str = "failing"

    def start(self, request: GenerationRequest) -> Generation:
        return _Failing(self.token)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_an_engine_failing_mid_stream_ends_it_as_vllm_does(
    backend_factory: BackendFactory, tokenizer: ChatTokenizer, path: str
) -> None:
    """The tokens so far, then vLLM's error event (its GenerationError) and [DONE]; a 500
    when the answer is not streamed."""
    client = await backend_factory(instance=_FailingPolicy(tokenizer.encode("hi")[0]))
    body: dict[str, Any] = {"model": MODEL, "stream": True, "return_token_ids": True}
    body |= {"messages": MESSAGES} if "chat" in path else {"prompt": "hello"}
    events = await _sse(client, path, body)
    assert events[-1] == "[DONE]"
    error = {"message": "Internal server error", "type": "InternalServerError", "param": None}
    assert events[-2] == {"error": error | {"code": 500}}
    ids = [t for e in events[:-2] for t in e["choices"][0].get("token_ids") or []]
    assert len(ids) == 2  # what was sampled before the failure went out
    whole = await client.post(path, json=body | {"stream": False}, headers=AUTH)
    assert whole.status == 500
    assert (await whole.json())["error"]["message"] == "Internal server error"
