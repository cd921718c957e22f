"""Backend fixtures: the shipped tokenizer (loaded once) and servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from rollstream.dev.backend.build_tokenizer import build
from rollstream.dev.backend.policies.base import Policy
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.family import Family
from rollstream.models.tokenizer import ChatTokenizer

SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


@pytest.fixture(scope="session")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


BackendFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
async def backend_factory(tokenizer: ChatTokenizer) -> AsyncIterator[BackendFactory]:
    """Start a backend on a free 127.0.0.1 port: ``client = await backend_factory(policy=...)``.

    ``tok``: a tokenizer served as the generic family; ``family``: a model family instead.
    """
    clients: list[TestClient[Any, Any]] = []

    async def start(
        tok: ChatTokenizer | None = None,
        instance: Policy | None = None,
        family: Family | None = None,
        **settings: Any,
    ) -> TestClient[Any, Any]:
        backend = Backend(
            BackendSettings(**settings),
            tokenizer=None if family else tok or tokenizer,
            policy=instance,
            family=family,
        )
        client: TestClient[Any, Any] = TestClient(TestServer(backend.app(), host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenarios.yaml"
    path.write_text(
        """
scenarios:
  - name: solve
    turns:
      - text: Let me look.
        tool_call: {tool: shell, arguments: {command: "echo polar > hello.txt"}}
      - tool_calls:
          - {tool: shell, arguments: {command: "cat hello.txt"}}
          - {tool: shell, arguments: {command: "ls"}}
      - text: Done.
  - name: needs-editor
    turns:
      - tool_call: {tool: str_replace_editor, arguments: {path: a.py}}
side_call_text: Side answer.
"""
    )
    return path


LLAMA_LIKE = (
    "{{- '<|begin|>' }}{%- for m in messages %}"
    "{{- '<|header|>' + m.role + '<|/header|>' + (m.content or '') }}"
    "{%- for c in m.tool_calls | default([], true) %}"
    "{{- '<tool_call>' + (c.function | tojson) + '</tool_call>' }}{%- endfor %}"
    "{{- '<|eot|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|header|>assistant<|/header|>' }}{%- endif %}"
)


@pytest.fixture(scope="session")
def other_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    """A tokenizer folder with another template, as a real model's would have."""
    return ChatTokenizer(build(tmp_path_factory.mktemp("other"), 1200, LLAMA_LIKE))
