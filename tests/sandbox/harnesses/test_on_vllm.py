"""Real harnesses through the interceptor to a real vLLM: its template, parsers and token ids.

The tiny model of each family plays the solve scenario (named in the task), vLLM renders,
parses and streams with its own code, and the harness must finish the task; every call must be
recorded complete, with the token ids vLLM returned, and the strict reconstruction must keep the
faithfulness invariant. Codex hangs up on ``response.completed`` before vLLM ends its body:
those calls must be recorded complete too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import pytest

from rollstream.dev.bench.fidelity import run_fidelity_bench
from rollstream.dev.bench.fidelity_serving import FidelityBenchConfig, scenario_turns
from rollstream.sandbox.harnesses.python_install import PYTHON_PACKAGES
from rollstream.settings import KafkaSettings
from tests.engine_servers import EngineServers
from tests.harness_stack import harnesses_installed

Mode = Literal["ordinary", "exact"]
#: (harness, family, context mode): each harness meets two families, each family two harnesses;
#: exact context where the family renders as its published template (tests/models parity).
RUNS: list[tuple[str, str, Mode]] = [
    ("claude-code", "qwen3", "ordinary"),
    ("gemini-cli", "qwen3", "ordinary"),
    ("qwen-code", "qwen3", "ordinary"),
    ("codex", "qwen3", "exact"),
    ("pi", "qwen3", "exact"),
    ("opencode", "qwen3", "exact"),
    ("codex", "qwen3-coder", "ordinary"),
    ("qwen-code", "qwen3-coder", "ordinary"),
    ("pi", "llama-3", "ordinary"),
    ("claude-code", "llama-3", "ordinary"),
    ("gemini-cli", "llama-3", "ordinary"),
    ("codex", "gpt-oss", "ordinary"),
    ("gemini-cli", "gpt-oss", "ordinary"),
    ("pi", "mistral", "exact"),
    ("claude-code", "mistral", "ordinary"),
    ("mini-swe-agent", "qwen3", "exact"),
    ("kilo", "llama-3", "ordinary"),
    ("openhands", "llama-3", "ordinary"),
    ("aider", "qwen3", "exact"),
    ("terminus-2", "llama-3", "ordinary"),
]


@pytest.mark.parametrize(
    ("harness", "family", "mode"),
    [
        pytest.param(*run, marks=pytest.mark.prebuilt("python-harnesses"))
        if run[0] in PYTHON_PACKAGES
        else run
        for run in RUNS
    ],
)
async def test_a_harness_on_vllm_is_recorded_whole_and_trains_faithfully(
    harness: str,
    family: str,
    mode: Mode,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    tmp_path: Path,
) -> None:
    """One cell of ``rollstream bench fidelity --engine vllm``, on the group's shared server."""
    server = engine_servers.get(family)

    @asynccontextmanager
    async def shared(name: str, *_: object) -> AsyncIterator[tuple[str, str]]:
        assert name == family
        yield server.url, server.model

    config = FidelityBenchConfig(
        families=(family,), harnesses=(harness,), modes=(mode,), engine="vllm", timeout_s=240
    )
    result = await run_fidelity_bench(
        config, kafka_settings, harnesses_installed(), lambda _: None, tmp_path, upstream=shared
    )
    [row] = result["rows"]
    # The harness finished the task (exit 0, hello.txt holds polar); every call was recorded
    # complete, with vLLM's token ids, and is readable in Kafka.
    assert (row["outcome"], row["error"], row["failed_calls"]) == ("ok", "", 0), row
    assert row["calls"] >= scenario_turns(harness), row
    assert row["violations"] == 0, row
    if mode == "exact":  # verified against vLLM: every continuing call went as tokens
        assert row["exact_refused"] == "", row
        assert row["exact_calls"] == row["calls"] - row["threads"], row
        assert row["segments"] == row["threads"], row
    assert result["task"].startswith("[scenario=solve] ")  # the plan's scenario, named
