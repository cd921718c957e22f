"""Compaction as one rollout, with real harnesses told to compact early (``compact_at``).

The scenario's first command prints a long output; the next call passes the harness's
threshold, so it asks the model for a summary (opencode and Codex without tools, Claude Code
with them and a warning not to call any) and goes on from a new prompt holding it. The
trajectory keeps every trace, marks the boundary (the summary's call and the call that went on
from it), and the trainer's batch gives every trace of the session its reward and advantage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.consumers.trainer.batch import to_batch
from rollstream.dev.backend.policies import default_scenarios_path
from rollstream.schemas import CallRecord, CallStatus, TopicNames
from rollstream.schemas.calls import SessionRequests
from rollstream.settings import KafkaSettings
from tests.engine_servers import EngineServers
from tests.harness_stack import (
    engine_interceptor,
    harnesses_installed,
    scripted_interceptor,
    solve_session,
)
from tests.schemas.samples import SCORED

pytestmark = pytest.mark.integration

#: Where each compacts (tokens): past its base prompt (system and tools: opencode's about
#: 15,400 of this family's tokens, Codex's 19,400, Claude Code's 40,600) and the summary, below
#: the same with the long output (about 3,500 to 10,000 more, as each truncates it).
COMPACT_AT = {"opencode": "17500", "claude-code": "45000", "codex": "21500"}
#: opencode on vLLM's Qwen3 vocabulary: its base prompt is about 7,200 tokens there, and
#: 17,400 with the long output.
ON_VLLM_AT = "12000"


def _request(records: list[CallRecord], record: CallRecord) -> dict[str, object]:
    request = SessionRequests(records).harness(record.call_id)
    assert isinstance(request, dict)
    return request


@pytest.mark.parametrize("name", sorted(COMPACT_AT))
async def test_a_harness_compacting_its_context_stays_one_rollout(
    name: str, kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    async with scripted_interceptor(
        kafka_settings, tmp_path / "state", scenarios=Path(default_scenarios_path())
    ) as proxy:
        records = await solve_session(
            name,
            proxy,
            kafka_settings,
            harnesses_installed(),
            tmp_path,
            task="[scenario: compact] Create hello.txt with polar.",
            options={"compact_at": COMPACT_AT[name]},
        )
    _assert_one_rollout(records, summary_tools=name == "claude-code")


@pytest.mark.parametrize("family", ["qwen3"])
async def test_opencode_compacting_on_vllm_stays_one_rollout(
    family: str,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    """The same on a real vLLM: its template renders, the engine's plan writes the summary."""
    server = engine_servers.get(family)
    async with engine_interceptor(kafka_settings, tmp_path / "state", server, family) as proxy:
        records = await solve_session(
            "opencode",
            proxy,
            kafka_settings,
            harnesses_installed(),
            tmp_path,
            task="[scenario=compact] Create hello.txt with polar.",
            options={"compact_at": ON_VLLM_AT},
        )
    _assert_one_rollout(records, summary_tools=False)


def _assert_one_rollout(records: list[CallRecord], *, summary_tools: bool) -> None:
    """One compaction boundary, every trace kept, every segment trained with one advantage."""
    # For a failure's message: each call's seq, whether it offered tools, its prompt's length.
    shapes = [
        (
            r.seq,
            bool(_request(records, r).get("tools")),
            r.prompt and r.prompt.shared_len + len(r.prompt.suffix),
        )
        for r in records
    ]
    calls = resolve_calls(records)
    by_id = {c.call_id: c for c in calls}
    trajectories = {}
    for strategy in ("prefix_merge", "tree"):
        rebuilt = get_strategy(strategy)(calls, StrategyContext())
        assert check_segments(rebuilt.segments, by_id) == []
        assert rebuilt.stats.break_reasons.get("compaction") == 1, (rebuilt.stats, shapes)
        [boundary] = rebuilt.stats.compactions
        summary = next(r for r in records if r.call_id == boundary.summary_call_id)
        resumed = next(r for r in records if r.call_id == boundary.resumed_call_id)
        # The summary was asked for (with tools by Claude Code only); the thread went on with
        # them.
        assert bool(_request(records, summary).get("tools")) is summary_tools
        assert _request(records, resumed).get("tools")
        assert resumed.seq > summary.seq
        # Every trace is kept: each answered call is in a segment, the summary's too.
        placed = {i for s in rebuilt.segments for i in s.call_ids}
        assert placed == {r.call_id for r in records if r.status is CallStatus.OK}
        trajectories[strategy] = rebuilt

    # One rollout: the trainer gives every trace of the session its reward and advantage.
    rebuilt = trajectories["prefix_merge"]
    assert len(rebuilt.segments) >= 2
    compacted = SCORED.model_copy(
        update={
            "reward": 1.0,
            "trajectory": SCORED.trajectory.model_copy(
                update={"segments": rebuilt.segments, "stats": rebuilt.stats}
            ),
        }
    )
    other = SCORED.model_copy(
        update={
            "reward": 0.0,
            "trajectory": SCORED.trajectory.model_copy(update={"trajectory_id": "other"}),
        }
    )
    batch = to_batch([compacted, other])
    rows = np.flatnonzero(batch.row_trajectory == 0)
    assert len(rows) == len(rebuilt.segments)  # the summary's trace and both sides of it
    advantage = batch.trajectory_advantages[0]
    assert advantage > 0 > batch.trajectory_advantages[1]
    for row in rows:
        trained = batch.loss_mask[row] == 1
        assert trained.any()
        assert np.all(batch.advantages[row][trained] == advantage)
    assert np.all(batch.rewards == [1.0, 0.0])
