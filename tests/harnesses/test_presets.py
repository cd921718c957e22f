"""The launch of each harness: command line, environment, config files (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollstream.errors import ConfigurationError
from rollstream.harnesses.presets import PRESETS, SESSION_ENV, HarnessContext, preset
from rollstream.schemas import ApiKind

CTX = HarnessContext("http://127.0.0.1:8100", "sess-1", "served", "Fix the bug.")
EXE = Path("/opt/bin/harness")


def test_every_preset_passes_session_and_base_url_and_the_instruction() -> None:
    for name, p in PRESETS.items():
        launch = p.launch(CTX, EXE)
        assert launch.argv[0] == str(EXE), name
        assert "Fix the bug." in launch.argv, name
        assert launch.env[SESSION_ENV] == "sess-1"
        assert launch.env["ROLLSTREAM_BASE_URL"] == "http://127.0.0.1:8100"


def test_claude_code_speaks_anthropic_with_the_session_as_key() -> None:
    launch = preset("claude-code").launch(CTX, EXE)
    assert preset("claude-code").api is ApiKind.ANTHROPIC_MESSAGES
    assert launch.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8100"  # no /v1: the SDK adds it
    assert launch.env["ANTHROPIC_API_KEY"] == "sess-1"
    assert launch.env["IS_SANDBOX"] == "1"
    assert launch.argv[launch.argv.index("--model") + 1] == "served"


def test_codex_gets_a_responses_provider_reading_the_session_env() -> None:
    launch = preset("codex").launch(CTX, EXE)
    overrides = [launch.argv[i + 1] for i, a in enumerate(launch.argv) if a == "-c"]
    assert 'model_provider="rollstream"' in overrides
    assert 'model_providers.rollstream.base_url="http://127.0.0.1:8100/v1"' in overrides
    assert f'model_providers.rollstream.env_key="{SESSION_ENV}"' in overrides
    assert 'model_providers.rollstream.wire_api="responses"' in overrides
    assert launch.argv[-1] == "Fix the bug."  # the prompt comes after every option


def test_qwen_code_is_configured_from_the_environment() -> None:
    env = preset("qwen-code").launch(CTX, EXE).env
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8100/v1"
    assert (env["OPENAI_API_KEY"], env["OPENAI_MODEL"]) == ("sess-1", "served")


def test_pi_gets_a_provider_file_in_home() -> None:
    launch = preset("pi").launch(CTX, EXE)
    provider = json.loads(launch.home_files[".pi/agent/models.json"])["providers"]["rollstream"]
    assert provider["baseUrl"] == "http://127.0.0.1:8100/v1"
    assert provider["api"] == "openai-completions"
    assert provider["apiKey"] == SESSION_ENV  # Pi reads the key from this variable
    assert [m["id"] for m in provider["models"]] == ["served"]
    assert launch.env["PI_OFFLINE"] == "1"


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match="claude-code, codex, qwen-code, pi"):
        preset("cursor")
