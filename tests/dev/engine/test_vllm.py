"""The real vLLM serving each family's tiny model: the plan played through vLLM's own code.

vLLM renders the prompt with the published template, its logits processor plays the plan, and
its own tool-call and reasoning parsers read the turn back; what rollstream relies on comes
back as vLLM gives it (prompt ids, per-chunk ids equal to the whole answer's, raw logprobs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from rollstream.apis.sse import SSEParser
from rollstream.dev.engine.families import ENGINE_FAMILIES
from tests.dev.engine.test_plan import BASH, SYSTEM
from tests.engine_servers import EngineServers

FAMILIES = list(ENGINE_FAMILIES)


def _request(model: str, task: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [SYSTEM, {"role": "user", "content": task}],
        "tools": [BASH],
        "return_token_ids": True,
        "logprobs": True,
        "temperature": 1.0,
        **extra,
    }


def _streamed(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    parser = SSEParser()
    chunks: list[dict[str, Any]] = []
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200, response.read()
        for data in response.iter_bytes():
            chunks += [e.data for e in parser.feed(data) if isinstance(e.data, dict)]
    return chunks


@pytest.mark.parametrize("family", FAMILIES)
def test_vllm_reads_the_planned_call_with_its_own_parsers(
    engine_servers: EngineServers, family: str
) -> None:
    server = engine_servers.get(family)
    body = _request(server.model, "[scenario=solve] Write polar into hello.txt.")
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
    choice = answer["choices"][0]
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "Bash"
    assert json.loads(call["function"]["arguments"])["command"] == "echo polar > hello.txt"
    assert choice["finish_reason"] == "tool_calls"
    assert answer["prompt_token_ids"] and choice["token_ids"]
    if ENGINE_FAMILIES[family].reasoning_parser:  # the plan thinks; vLLM's parser takes it out
        message = choice["message"]
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        assert reasoning and "echo polar > hello.txt" in reasoning
        assert "<think>" not in (message.get("content") or "")
    # The model's own logprobs (random weights: about -log of the vocabulary), not the forcing.
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert len(logprobs) == len(choice["token_ids"]) and max(logprobs) < -1.0


@pytest.mark.parametrize("family", FAMILIES)
def test_streamed_token_ids_join_to_the_whole_answers(
    engine_servers: EngineServers, family: str
) -> None:
    server = engine_servers.get(family)
    body = _request(server.model, "[scenario=parallel] Make the file, then list.")
    whole = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
    chunks = _streamed(server.url, body | {"stream": True})
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    streamed = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
    assert streamed == whole["choices"][0]["token_ids"]
    names: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for delta in choice["delta"].get("tool_calls") or []:
                if delta.get("function", {}).get("name"):
                    names[delta["index"]] = delta["function"]["name"]
    whole_calls = whole["choices"][0]["message"]["tool_calls"]
    assert [names[i] for i in sorted(names)] == [c["function"]["name"] for c in whole_calls]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rendered_prompt_is_what_tokenize_gives(
    engine_servers: EngineServers, family: str
) -> None:
    server = engine_servers.get(family)
    body = _request(server.model, "[scenario=solve] Write polar.", max_tokens=4)
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
    tokenized = httpx.post(
        f"{server.url}/tokenize",
        json={
            "model": server.model,
            "messages": body["messages"],
            "tools": body["tools"],
            "add_generation_prompt": True,
        },
        timeout=60,
    ).json()
    assert tokenized["tokens"] == answer["prompt_token_ids"]


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = [int(c) for c in children]
    for child in list(found):
        found += _descendants(child)
    return found


@pytest.mark.parametrize("family", ["qwen3"])
def test_a_tiny_model_runs_in_the_engine_core_process(
    family: str, engine_servers: EngineServers
) -> None:
    """Two processes (the API server and its engine core), not a third worker that imports
    torch and vLLM again at every start (what the "uni" executor alone still ran)."""
    server = engine_servers.get(family)
    assert server._proc is not None
    pids = _descendants(server._proc.pid)
    names = [Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids]
    assert names.count("VLLM::EngineCor") == 1, names
    assert not [n for n in names if "Worker" in n], names
