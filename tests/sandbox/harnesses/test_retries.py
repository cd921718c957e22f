"""Retries are not branches, with real harnesses: a first attempt that fails mid-stream.

The reference backend fails one call mid-stream as vLLM does when its engine fails (a few
tokens, then an error event and ``[DONE]``); the harness sends the same request again. The
failed attempt stays in the log, named by its retry (``repeats``), marked superseded in the
reconstruction and left out of training; the thread goes on unbroken from the retry's answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.dev.backend.policies.base import (
    Generation,
    GenerationFailed,
    GenerationRequest,
    Policy,
    Sample,
)
from rollstream.dev.backend.policies.scenarios import ScenarioFile
from rollstream.dev.backend.policies.scripted import ScriptedPolicy
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import CallStatus, TopicNames
from rollstream.settings import KafkaSettings
from tests.harness_stack import harnesses_installed, scripted_interceptor, solve_session

pytestmark = pytest.mark.integration
OK = CallStatus.OK


@dataclass
class Failing:
    """A generation that samples ``left`` tokens, then fails as an engine does."""

    inner: Generation
    left: int

    def next_token(self) -> Sample:
        """The inner generation's token, until the failure."""
        if self.left == 0:
            raise GenerationFailed("Internal server error")
        self.left -= 1
        return self.inner.next_token()


@dataclass
class FailsOnceMidStream:
    """The scripted policy, failing the first call after the first command, once."""

    inner: ScriptedPolicy
    failed: list[GenerationRequest] = field(default_factory=list)
    name: str = "scripted"

    def start(self, request: GenerationRequest) -> Generation:
        """The scripted generation; the first one after the command fails after 3 tokens."""
        generation = self.inner.start(request)
        # Token ids in exact context, messages otherwise: the prompt's text tells either way.
        prompt = self.inner.tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
        if "echo polar > hello.txt" in prompt and not self.failed:
            self.failed.append(request)
            return Failing(generation, 3)
        return generation


#: The harnesses that send a call whose stream failed again (Qwen Code ends its run with the
#: error; Gemini CLI ends its turn and exits 0 with the task undone).
RETRYING = ["claude-code", "codex", "opencode", "pi"]


@pytest.mark.parametrize("name", RETRYING)
async def test_a_retried_call_supersedes_the_attempt_that_failed_mid_stream(
    name: str, kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> None:
    policies: list[FailsOnceMidStream] = []

    def failing(tokenizer: ChatTokenizer, file: ScenarioFile) -> Policy:
        policies.append(FailsOnceMidStream(ScriptedPolicy(tokenizer, file)))
        return policies[-1]

    state = tmp_path / "state"
    async with scripted_interceptor(kafka_settings, state, failing, context="exact") as proxy:
        records = await solve_session(name, proxy, kafka_settings, harnesses_installed(), tmp_path)
    assert policies[0].failed, "no call failed: the test did not test"
    [attempt] = [r for r in records if r.status is not CallStatus.OK]
    assert attempt.error is not None and attempt.error.type == "upstream_stream_error"
    [retry] = [r for r in records if r.repeats == attempt.call_id]
    assert retry.status is CallStatus.OK and retry.seq > attempt.seq
    ended = attempt.timings.ended_at
    assert ended is not None and retry.timings.started_at >= ended

    calls = resolve_calls(records)
    by_id = {c.call_id: c for c in calls}
    assert by_id[attempt.call_id].superseded_by == retry.call_id
    for strategy in ("prefix_merge", "tree"):
        rebuilt = get_strategy(strategy)(calls, StrategyContext())
        assert check_segments(rebuilt.segments, by_id) == []
        assert rebuilt.stats.failed_calls == 1
        assert rebuilt.stats.calls_used == len(records) - 1
        # Only answered calls are trained: nothing of the failed attempt (tree trains each
        # token once).
        if strategy == "tree":
            trained = sum(s.trainable_tokens for s in rebuilt.segments)
            assert trained == sum(len(c.completion or []) for c in calls if c.status is OK)
        # The thread goes on from the retry: in exact context, the segment holding the retry's
        # answer goes on past it, into the next turn.
        else:
            context = by_id[retry.call_id].context()
            assert context is not None
            assert any(
                len(s.input_ids) > len(context) and s.input_ids.startswith(context)
                for s in rebuilt.segments
            ), rebuilt.stats
