"""The reference backend held to vLLM: the same requests to both, compared field by field.

The backend is the fast stand-in every other integration test talks to; it must not drift from
the engine users run. Each request goes to a real vLLM serving a family's tiny model (playing
the plan) and to the backend serving the same family (playing the same scenario): every field
either answer has, with its type, must be in the other's too (streamed: over all chunks), and
the values rollstream and harnesses act on must agree (finish reasons, tool calls, token counts,
error status, type, code and parameter; limit messages word for word). A difference that is
known and harmless is listed in ``KNOWN`` with the reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiohttp.test_utils import TestServer

from rollstream.apis.sse import SSEParser
from rollstream.dev.backend.policies import default_scenarios_path
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.engine.tiny_model import CONTEXT
from rollstream.models.families import load_family
from tests.dev.engine.test_plan import BASH, SYSTEM
from tests.engine_servers import EngineServers

pytestmark = pytest.mark.integration

#: Paths (see ``fields``) one side may have and the other not, and why. Fields null on one side
#: count as absent; every other field vLLM 0.32 writes, the backend writes too.
KNOWN: dict[str, str] = {
    "system_fingerprint": "vLLM names itself in streamed chunks and in some whole answers"
    " (llama-3's, not qwen3's), the backend in chunks; nothing reads it",
}


def fields(value: Any, path: str = "") -> Iterator[str]:
    """Every field path with its JSON type: ``choices[].message.content:str``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from fields(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        yield f"{path}:list"
        for item in value:
            yield from fields(item, f"{path}[]")
    else:
        kind = {bool: "bool", int: "num", float: "num", str: "str"}.get(type(value), "null")
        yield f"{path}:{kind}"


def _known(path: str) -> bool:
    bare = path.rsplit(":", 1)[0]
    return any(bare == k or bare.startswith(k + ".") or bare.startswith(k + "[") for k in KNOWN)


def differences(ours: Any, theirs: Any) -> tuple[set[str], set[str]]:
    """Field paths only the backend has, and only vLLM has (null and absent are alike)."""
    a = {p for p in fields(ours) if not p.endswith(":null") and not _known(p)}
    b = {p for p in fields(theirs) if not p.endswith(":null") and not _known(p)}
    return a - b, b - a


@pytest.fixture
async def backend_for(
    engine_servers: EngineServers,
) -> AsyncIterator[Any]:
    servers: list[TestServer] = []

    async def start(family: str) -> str:
        served = load_family(family)
        settings = BackendSettings(
            policy="scripted",
            scenarios=default_scenarios_path(),
            model=engine_servers.get(family).model,
            max_model_len=CONTEXT,
        )
        server = TestServer(Backend(settings, family=served).app(), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("")).rstrip("/")

    yield start
    for server in servers:
        await server.close()


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [SYSTEM, {"role": "user", "content": "[scenario=solve] Write polar."}],
        "tools": [BASH],
        "return_token_ids": True,
        "logprobs": True,
        "top_logprobs": 2,
        **extra,
    }


async def _post(client: httpx.AsyncClient, url: str, body: Any) -> tuple[int, Any]:
    content = body if isinstance(body, str) else json.dumps(body)
    headers = {"content-type": "application/json", "authorization": "Bearer held@solve"}
    response = await client.post(url, content=content, headers=headers)
    return response.status_code, response.json()


async def _stream(client: httpx.AsyncClient, url: str, body: Any) -> list[Any]:
    parser = SSEParser()
    events: list[Any] = []
    headers = {"authorization": "Bearer held@solve"}
    async with client.stream("POST", url, json=body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        async for data in response.aiter_bytes():
            events += [e.data for e in parser.feed(data) if isinstance(e.data, dict)]
    return events


def _calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]


@pytest.mark.parametrize("family", ["qwen3", "llama-3"])
async def test_chat_whole_and_streamed_have_vllms_fields_and_meaning(
    engine_servers: EngineServers, backend_for: Any, family: str
) -> None:
    engine = engine_servers.get(family)
    backend = await backend_for(family)
    async with httpx.AsyncClient(timeout=120) as client:
        body = _chat(engine.model)
        answers = [
            await _post(client, f"{u}/v1/chat/completions", body) for u in (backend, engine.url)
        ]
        (status_b, ours), (status_v, theirs) = answers
        assert status_b == status_v == 200
        assert differences(ours, theirs) == (set(), set())
        mine, real = ours["choices"][0], theirs["choices"][0]
        assert mine["finish_reason"] == real["finish_reason"] == "tool_calls"
        assert _calls(mine["message"]) == _calls(real["message"])
        assert ours["usage"]["prompt_tokens"] == len(ours["prompt_token_ids"])
        assert theirs["usage"]["prompt_tokens"] == len(theirs["prompt_token_ids"])

        streamed = body | {"stream": True, "stream_options": {"include_usage": True}}
        ours_s = await _stream(client, f"{backend}/v1/chat/completions", streamed)
        theirs_s = await _stream(client, f"{engine.url}/v1/chat/completions", streamed)
        assert differences(ours_s, theirs_s) == (set(), set())
        for chunks in (ours_s, theirs_s):
            assert "prompt_token_ids" in chunks[0] and chunks[-1]["usage"] is not None
            assert chunks[-1]["choices"] == []


@pytest.mark.parametrize("family", ["qwen3"])
async def test_completions_tokenize_and_models_have_vllms_fields(
    engine_servers: EngineServers, backend_for: Any, family: str
) -> None:
    engine = engine_servers.get(family)
    backend = await backend_for(family)
    async with httpx.AsyncClient(timeout=120) as client:
        tokenize = {"model": engine.model, "messages": _chat(engine.model)["messages"]}
        _, rendered = await _post(client, f"{engine.url}/tokenize", tokenize)
        _, ours_t = await _post(client, f"{backend}/tokenize", tokenize)
        assert differences(ours_t, rendered) == (set(), set())
        assert ours_t["tokens"] == rendered["tokens"]  # qwen3 renders as its template
        body = {
            "model": engine.model,
            "prompt": rendered["tokens"],
            "max_tokens": 40,
            "return_token_ids": True,
            "logprobs": 1,
        }
        (sb, ours), (sv, theirs) = [
            await _post(client, f"{u}/v1/completions", body) for u in (backend, engine.url)
        ]
        assert sb == sv == 200
        assert differences(ours, theirs) == (set(), set())
        streamed = body | {"stream": True, "stream_options": {"include_usage": True}}
        ours_s = await _stream(client, f"{backend}/v1/completions", streamed)
        theirs_s = await _stream(client, f"{engine.url}/v1/completions", streamed)
        assert differences(ours_s, theirs_s) == (set(), set())
        ours_m, theirs_m = [
            (await client.get(f"{u}/v1/models")).json() for u in (backend, engine.url)
        ]
        assert differences(ours_m, theirs_m) == (set(), set())
        assert ours_m["data"][0]["max_model_len"] == theirs_m["data"][0]["max_model_len"]


@pytest.mark.parametrize("family", ["qwen3"])
async def test_errors_have_vllms_status_shape_and_words(
    engine_servers: EngineServers, backend_for: Any, family: str
) -> None:
    engine = engine_servers.get(family)
    backend = await backend_for(family)
    over = [{"role": "user", "content": "polar " * (CONTEXT + 100)}]
    cases: list[tuple[str, Any]] = [
        ("unknown model", _chat("no-such-model")),
        ("output limit over the context", _chat(engine.model, max_tokens=CONTEXT + 1)),
        ("prompt over the context", {"model": engine.model, "messages": over}),
        ("malformed JSON", "{not json"),
    ]
    async with httpx.AsyncClient(timeout=120) as client:
        for name, body in cases:
            (sb, ours), (sv, theirs) = [
                await _post(client, f"{u}/v1/chat/completions", body) for u in (backend, engine.url)
            ]
            assert sb == sv, (name, ours, theirs)
            assert differences(ours, theirs) == (set(), set()), name
            mine, real = ours["error"], theirs["error"]
            assert (mine["type"], mine["code"]) == (real["type"], real["code"]), name
            if "context" in name:  # the interceptor reads these words (rollstream.apis.limits)
                assert mine["message"] == real["message"] and mine["param"] == real["param"]
