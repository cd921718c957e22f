"""Real harnesses through the interceptor to a real vLLM: its template, parsers and token ids.

The tiny model of each family plays the solve scenario (named in the task), vLLM renders,
parses and streams with its own code, and the harness must finish the task; every call must be
recorded complete, with the token ids vLLM returned, and the strict reconstruction must keep the
faithfulness invariant. Codex hangs up on ``response.completed`` before vLLM ends its body:
those calls must be recorded complete too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from rollstream.dev.bench.fidelity_serving import TASK
from rollstream.models.families import load_family
from rollstream.processing.reconstruct.fidelity import fidelity_row
from rollstream.schemas import CallStatus, TopicNames
from rollstream.settings import KafkaSettings
from tests.engine_servers import EngineServers
from tests.harness_stack import engine_interceptor, harnesses_installed, solve_session

Mode = Literal["ordinary", "exact"]
#: (harness, family, context mode): each harness meets two families, each family two harnesses;
#: exact context where the family renders as its published template (tests/models parity).
RUNS: list[tuple[str, str, Mode]] = [
    ("claude-code", "qwen3", "ordinary"),
    ("gemini-cli", "qwen3", "ordinary"),
    ("qwen-code", "qwen3", "ordinary"),
    ("codex", "qwen3", "exact"),
    ("pi", "qwen3", "exact"),
    ("codex", "qwen3-coder", "ordinary"),
    ("qwen-code", "qwen3-coder", "ordinary"),
    ("pi", "llama-3", "ordinary"),
    ("claude-code", "llama-3", "ordinary"),
    ("gemini-cli", "llama-3", "ordinary"),
]


@pytest.fixture(scope="module")
def harness_bin() -> Path:
    return harnesses_installed()


@pytest.mark.parametrize(("harness", "family", "mode"), RUNS)
async def test_a_harness_on_vllm_is_recorded_whole_and_trains_faithfully(
    harness: str,
    family: str,
    mode: Mode,
    engine_servers: EngineServers,
    harness_bin: Path,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    server = engine_servers.get(family)
    async with engine_interceptor(
        kafka_settings, tmp_path / "state", server, family, mode
    ) as interceptor:
        records = await solve_session(
            harness,
            interceptor,
            kafka_settings,
            harness_bin,
            tmp_path,
            task=f"[scenario=solve] {TASK}",
        )
    assert [r.status for r in records] == [CallStatus.OK] * len(records)
    assert all(r.has_tokens for r in records)
    row = fidelity_row(family, harness, mode, records, load_family(family))
    assert row.violations == 0, row
    if mode == "exact":  # verified against vLLM: every continuing call went as tokens
        assert row.exact_calls == row.calls - row.threads, row
        assert row.segments == row.threads, row
