"""Exact-context mode with the real harnesses: each conversation thread stays one segment.

The reference backend's chat template re-renders a sampled tool call differently from its
sampled text, so in ordinary mode ``prefix_merge`` breaks a conversation wherever the harness
sent such a turn back; in exact mode the interceptor keeps the sampled tokens and the thread
merges whole. Threads are counted independently of the mode, from the recorded Chat requests:
a call continues a thread when its messages are an earlier call's messages, that call's
answer, and more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.fidelity import count_threads
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.interceptor.exact.sessions import FIRST_CALL, NOT_APPENDED
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.schemas import CallRecord, CallStatus, ContextMode, TopicNames
from rollstream.settings import KafkaSettings
from tests.harness_stack import harnesses_installed, scripted_interceptor, solve_session
from tests.sandbox.harnesses.conftest import AblationReport, AblationRow

pytestmark = pytest.mark.integration

Mode = Literal["ordinary", "exact"]
Start = Callable[[Mode], Any]


@pytest.fixture(scope="module")
def harness_bin() -> Path:
    return harnesses_installed()


def _segments(records: list[CallRecord]) -> int:
    calls = resolve_calls(records)
    rebuilt = get_strategy("prefix_merge")(calls, StrategyContext(calls_reported=len(records)))
    assert check_segments(rebuilt.segments, {c.call_id: c for c in calls}) == []
    return len(rebuilt.segments)


@pytest.fixture
async def start(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> AsyncIterator[Start]:
    """Run one harness session in a given mode (one interceptor at a time)."""

    async def run(name: str, mode: Mode, harness_bin: Path) -> list[CallRecord]:
        async with scripted_interceptor(
            kafka_settings, tmp_path / mode / "state", context=mode
        ) as interceptor:
            return await solve_session(
                name, interceptor, kafka_settings, harness_bin, tmp_path / mode
            )

    yield run  # type: ignore[misc]


@pytest.mark.parametrize("name", list(PACKAGES))
async def test_exact_context_keeps_each_thread_in_one_segment(
    name: str,
    harness_bin: Path,
    start: Any,
    ablation_report: AblationReport,
) -> None:
    exact = await start(name, "exact", harness_bin)
    ordinary = await start(name, "ordinary", harness_bin)
    for records in (exact, ordinary):
        assert all(r.status is CallStatus.OK and r.has_tokens for r in records)
    threads = count_threads(exact)
    assert count_threads(ordinary) == threads  # the same conversation, whatever the mode
    # Every call continuing a thread was sent as tokens; each thread's first call says why not.
    modes = [r.context.mode if r.context else None for r in exact]
    assert modes.count(ContextMode.ORDINARY) == threads
    assert modes.count(ContextMode.EXACT) == len(exact) - threads
    for record in exact:
        assert record.context is not None
        if record.context.mode is ContextMode.ORDINARY:
            assert record.context.note in (FIRST_CALL, NOT_APPENDED)
    exact_segments, ordinary_segments = _segments(exact), _segments(ordinary)
    ablation_report(AblationRow(name, len(exact), threads, exact_segments, ordinary_segments))
    assert exact_segments == threads
    assert ordinary_segments > threads
