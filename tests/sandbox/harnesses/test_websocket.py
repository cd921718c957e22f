"""Codex over WebSocket, end to end: the Responses API on one WebSocket per thread.

Codex (its ``supports_websockets`` provider option, the task option ``transport=websocket``)
opens a WebSocket to the interceptor, warms it up, and sends each later call as only the items
after the response it names. The interceptor ends the WebSocket and sends each call through its
HTTP path whole. The judge is Codex itself: the same task over HTTP, where Codex sends every
call whole, must reach the model as the same conversation, call for call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.dev.bench.fidelity_serving import TASK
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

pytestmark = pytest.mark.integration

#: What differs between two runs of one task: ids the backend and Codex make up.
_MADE_UP = re.compile(r"chatcmpl-tool-[0-9a-f]+|Chunk ID: [0-9a-f]+|call_[0-9A-Za-z]+")


def _conversations(records: list[CallRecord], run: Path) -> list[str]:
    """Each call's messages as the model was sent them, made-up ids and the run's folder
    (its workspace and HOME) masked."""
    requests = SessionRequests(records)
    shown = []
    for record in records:
        messages = requests.upstream(record.call_id)["messages"]
        text = json.dumps(messages, sort_keys=True).replace(str(run), "<run>")
        shown.append(_MADE_UP.sub("<id>", text))
    return shown


def _faithful(records: list[CallRecord]) -> int:
    """Rebuilt strictly, the faithfulness invariant holds; how many segments."""
    calls = resolve_calls(records)
    rebuilt = get_strategy("prefix_merge")(calls, StrategyContext())
    assert check_segments(rebuilt.segments, {c.call_id: c for c in calls}) == []
    assert not rebuilt.stats.break_reasons, rebuilt.stats
    return len(rebuilt.segments)


async def test_codex_over_websocket_reaches_the_model_as_it_does_over_http(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    runs = {}
    for transport in ("http", "websocket"):
        state = tmp_path / transport / "state"
        async with scripted_interceptor(kafka_settings, state, context="exact") as proxy:
            records = await solve_session(
                "codex",
                proxy,
                kafka_settings,
                harnesses_installed(),
                tmp_path / transport,
                options={"transport": transport},
            )
            runs[transport] = (records, dict(proxy.websockets.counts))
    (http, http_counts), (ws, ws_counts) = runs["http"], runs["websocket"]
    assert http_counts == {}  # by default Codex speaks HTTP
    assert {r.transport for r in http} == {"http"}
    # Over WebSocket: every call came through the bridge, most naming the last response.
    assert [(r.status, r.transport) for r in ws] == [(CallStatus.OK, "websocket")] * len(ws)
    assert ws_counts["calls"] == len(ws) and ws_counts.get("refused", 0) == 0
    assert ws_counts["continued"] >= len(ws) - 1, ws_counts
    # Call for call, the model was sent the same conversation.
    assert _conversations(ws, tmp_path / "websocket") == _conversations(http, tmp_path / "http")
    assert _faithful(ws) == _faithful(http) == 1


@pytest.mark.parametrize("family", ["qwen3"])
async def test_codex_over_websocket_on_vllm_is_recorded_whole(
    family: str,
    engine_servers: EngineServers,
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    tmp_path: Path,
) -> None:
    """The same on a real vLLM: its template renders, its parsers read the tool calls; in exact
    context every call goes on from the last one's tokens (as ``test_on_vllm`` runs Codex)."""
    server = engine_servers.get(family)
    state = tmp_path / "state"
    async with engine_interceptor(kafka_settings, state, server, family, "exact") as proxy:
        records = await solve_session(
            "codex",
            proxy,
            kafka_settings,
            harnesses_installed(),
            tmp_path,
            task=f"[scenario=solve] {TASK}",
            options={"transport": "websocket"},
        )
        counts = dict(proxy.websockets.counts)
    assert [(r.status, r.transport) for r in records] == [(CallStatus.OK, "websocket")] * len(
        records
    )
    assert len(records) >= 3 and counts["continued"] >= len(records) - 1, counts
    assert all(r.prompt is not None and r.completion_token_ids for r in records)
    assert _faithful(records) == 1
