"""``rollstream ablate`` against a real broker: reads the events, writes the three files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rollstream.cli import cli
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings
from tests.conftest import ProducerFactory
from tests.consumers.reconstruct.test_service import _send

pytestmark = pytest.mark.integration
SHAPE = SyntheticShape(turns=3, system_tokens=32, tool_result_tokens=8, completion_tokens=6)


async def test_ablate_command(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    producer_factory: ProducerFactory,
    tmp_path: Path,
) -> None:
    producer = await producer_factory()
    sessions = [synthetic_session(f"a{i}", SHAPE, seed=i) for i in range(4)]
    records = [r for batch in zip(*(s.records for s in sessions), strict=True) for r in batch]
    await _send(producer, rollstream_topics.events, records)
    await producer.send(rollstream_topics.events, b"junk", key=b"a0")
    await producer.flush()
    env = {
        "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "ROLLSTREAM_TOPIC_PREFIX": kafka_settings.topic_prefix,
    }
    out = tmp_path / "ablation"

    def run(*args: str) -> Result:  # the command runs its own event loop
        return CliRunner().invoke(cli, ["ablate", "--out", str(out), *args], env=env)

    result = await asyncio.to_thread(run, "--strategies", "per_call,prefix_merge,retokenize")
    assert result.exit_code == 0, result.output
    assert "4 sessions with calls in 21 records (1 undecodable skipped)" in result.output
    assert "| prefix_merge | 4 | 1.00 |" in result.output
    assert "| per_call | 4 | 3.00 |" in result.output
    assert (out / "ablation.md").read_text().startswith("Ablation over 4 sessions (12 calls).")
    data = json.loads((out / "ablation.json").read_text())
    assert [s["strategy"] for s in data["strategies"]] == ["per_call", "prefix_merge", "retokenize"]
    assert (out / "ablation.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

    result = await asyncio.to_thread(run, "--strategies", "tree", "--session", "a2")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "ablation.json").read_text())["sessions"] == 1
    later = await asyncio.to_thread(run, "--strategies", "tree", "--since", "2999-01-01")
    assert later.exit_code == 0, later.output
    assert "0 sessions with calls in 0 records" in later.output
    bad = await asyncio.to_thread(run, "--strategies", "nope")
    assert bad.exit_code == 1 and "unknown strategy 'nope'" in bad.output
