"""``rollstream up --family``: the backend serves the family, the interceptor knows it and gets
the folder the backend really serves (not the shipped toy tokenizer)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from rollstream.cli import cli
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.stack.components import plan
from rollstream.dev.stack.settings import StackSettings
from rollstream.errors import ConfigurationError

VOCABULARIES = Path("/vocab-cache")


@pytest.fixture(autouse=True)
def vocabularies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Vocabulary folders without building them: their names, as asked for."""
    asked: list[str] = []

    def vocabulary_dir(name: str, cache_dir: Path | None = None) -> Path:
        asked.append(name)
        return VOCABULARIES / name

    monkeypatch.setattr("rollstream.models.vocabularies.vocabulary_dir", vocabulary_dir)
    for name in ("FAMILY", "TOKENIZER"):
        monkeypatch.delenv(f"ROLLSTREAM_BACKEND_{name}", raising=False)
    return asked


def _commands(**overrides: Any) -> dict[str, list[str]]:
    settings = StackSettings(backend_port=0, interceptor_port=0, node_port=0, **overrides)
    commands = {}
    for component in plan(settings):
        if component.name != "vllm":
            assert component.argv[:3] == [sys.executable, "-m", "rollstream"]
            commands[component.name] = component.argv[3:]
    return commands


def _option(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_a_family_reaches_the_backend_and_the_interceptor_with_its_vocabulary(
    vocabularies: list[str],
) -> None:
    commands = _commands(family="qwen3-coder", context="exact")
    backend, interceptor = commands["backend"], commands["interceptor"]
    assert _option(backend, "--family") == _option(interceptor, "--family") == "qwen3-coder"
    folder = str(VOCABULARIES / "qwen3")  # Qwen3-Coder is served on Qwen3's vocabulary
    assert _option(backend, "--tokenizer") == _option(interceptor, "--tokenizer") == folder
    assert vocabularies == ["qwen3"]
    for args in commands.values():  # every flag is one the command has
        options = {o for p in cli.commands[args[0]].params for o in getattr(p, "opts", [])}
        assert {a for a in args[1:] if a.startswith("--")} <= options, args[0]


def test_the_environment_s_family_and_folder_are_honoured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, vocabularies: list[str]
) -> None:
    # A folder alone (the generic family): the interceptor gets it, not the shipped one.
    monkeypatch.setenv("ROLLSTREAM_BACKEND_TOKENIZER", str(tmp_path))
    commands = _commands()
    assert _option(commands["interceptor"], "--tokenizer") == str(tmp_path)
    assert "--family" not in commands["interceptor"]
    # A family from the environment: both sides get it, on the given folder.
    monkeypatch.setenv("ROLLSTREAM_BACKEND_FAMILY", "llama-3")
    commands = _commands()
    assert _option(commands["backend"], "--family") == "llama-3"
    assert _option(commands["interceptor"], "--family") == "llama-3"
    assert _option(commands["interceptor"], "--tokenizer") == str(tmp_path)
    assert vocabularies == []  # the folder was given: nothing to build


def test_without_a_family_nothing_changes(vocabularies: list[str]) -> None:
    commands = _commands()
    assert "--family" not in commands["backend"] and "--tokenizer" not in commands["backend"]
    assert _option(commands["interceptor"], "--tokenizer") == str(default_tokenizer_dir())
    assert vocabularies == []


def test_a_remote_upstream_gets_the_family_but_no_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, vocabularies: list[str]
) -> None:
    remote = _commands(family="gpt-oss", upstream="http://gpu:8000", context="exact")
    assert "backend" not in remote and vocabularies == []
    assert _option(remote["interceptor"], "--family") == "gpt-oss"
    assert "--tokenizer" not in remote["interceptor"]  # the interceptor finds the vocabulary
    # With a family the interceptor parses the model's own format: any vLLM parser will do.
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    vllm = _commands(
        family="qwen3-coder", vllm="Qwen/Qwen3-Coder", tool_parser="qwen3_coder", context="exact"
    )
    assert _option(vllm["interceptor"], "--family") == "qwen3-coder"
    assert _option(vllm["interceptor"], "--context") == "exact"


def test_an_unknown_family_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown model family 'qwen9'; known: qwen3, "):
        _commands(family="qwen9")
