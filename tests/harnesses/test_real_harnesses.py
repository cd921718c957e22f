"""The four real harnesses, headless, through the interceptor to the reference backend.

Each one must finish a multi-turn tool task (write a file with a shell tool, read it back,
answer), exit 0, and leave every one of its LLM calls in Kafka with exactly the token ids and
logprobs the backend served. The backend is the witness: a wrapper around its policy notes what
it served, independently of the interceptor.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from rollstream.backend.policies.base import Generation, GenerationRequest, Policy
from rollstream.backend.policies.scripted import ScriptedGeneration, ScriptedPolicy
from rollstream.backend.scenarios import load_scenarios
from rollstream.backend.server import Backend
from rollstream.backend.settings import BackendSettings
from rollstream.backend.tokenizer import ChatTokenizer, default_tokenizer_dir
from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.harnesses.install import PACKAGES, install
from rollstream.harnesses.presets import PRESETS, HarnessContext
from rollstream.harnesses.runner import run_harness
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.producers.publisher import PublisherSettings
from rollstream.schemas import CallRecord, CallStatus, TopicNames, resolve_prompt
from rollstream.schemas.packed import TokenIds
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration

SCENARIOS = """
scenarios:
  - name: solve
    turns:
      - text: I will create the file.
        tool_call: {tool: shell, arguments: {command: "echo polar > hello.txt"}}
      - tool_call: {tool: shell, arguments: {command: "cat hello.txt"}}
      - text: Done. hello.txt contains polar.
side_call_text: Coding session.
"""
MODEL = "rollstream-tiny"


@dataclass
class Served:
    """What the backend generated for one request."""

    prompt_ids: list[int]
    generation: ScriptedGeneration


@dataclass
class WitnessPolicy:
    """The scripted policy, noting every generation it starts."""

    inner: ScriptedPolicy
    served: list[Served] = field(default_factory=list)
    name: str = "scripted"

    def start(self, request: GenerationRequest) -> Generation:
        """Start the scripted generation and keep a note of it."""
        generation = self.inner.start(request)
        self.served.append(Served(list(request.prompt_ids), generation))
        return generation


@pytest.fixture(scope="module")
def harness_bin() -> Path:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the real harnesses cannot be installed")
    return install(JAR_CACHE)  # done by `make test` already; idempotent


@dataclass
class Stack:
    interceptor: Interceptor
    witness: WitnessPolicy


@pytest.fixture(scope="module")
def _scenarios(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("scenarios") / "solve.yaml"
    path.write_text(SCENARIOS)
    yield path


@pytest.fixture
async def stack(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, _scenarios: Path, tmp_path: Path
) -> AsyncIterator[Stack]:
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    # The harnesses' system prompts and tool lists are long in this small vocabulary
    # (Claude Code: 64k tokens), so the context is made large enough.
    settings = BackendSettings(policy="scripted", model=MODEL, max_model_len=262144)
    witness = WitnessPolicy(ScriptedPolicy(tokenizer, load_scenarios(_scenarios)))
    policy: Policy = witness
    server = TestServer(Backend(settings, tokenizer, policy).app(), host="127.0.0.1")
    await server.start_server()
    upstream = str(server.make_url("")).rstrip("/")
    interceptor = Interceptor(
        InterceptorSettings(upstream=upstream, port=0, admin_port=0, upstream_model=MODEL),
        kafka_settings,
        PublisherSettings(),
        StatePaths(state_dir=tmp_path / "state"),
    )
    await interceptor.start()
    try:
        yield Stack(interceptor, witness)
    finally:
        await interceptor.stop()
        await server.close()


async def _session_records(
    settings: KafkaSettings, session: str, expected: int
) -> list[CallRecord]:
    topic = TopicNames(settings.topic_prefix).events
    records = await read_records(
        settings,
        topic,
        CallRecord,
        expected,
        where=lambda r: r.session_id == session,
        timeout=30,
        settle_s=0.5,  # anything beyond the expected count would now show up
    )
    return sorted(records, key=lambda r: r.seq)


@pytest.mark.parametrize("name", list(PACKAGES))  # the npm harnesses
async def test_harness_completes_a_tool_task_and_every_call_is_captured(
    name: str, harness_bin: Path, stack: Stack, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    preset = PRESETS[name]
    session = f"{name}-{uuid.uuid4().hex[:8]}"
    ctx = HarnessContext(stack.interceptor.url, session, MODEL, "Create hello.txt with polar.")
    launch = preset.launch(ctx, harness_bin / PACKAGES[name][1])
    workdir = tmp_path / "work"
    result = await run_harness(launch, tmp_path / "home", workdir, tmp_path / "logs", 240)

    assert result.exit_code == 0, f"{name} failed:\n{result.stdout_tail}\n{result.stderr_tail}"
    assert (workdir / "hello.txt").read_text() == "polar\n"
    assert "Done." in result.stdout_tail
    served = stack.witness.served
    # At least the three scripted turns; Claude Code adds a side call.
    assert len(served) >= 3

    records = await _session_records(kafka_settings, session, len(served))
    assert len(records) == len(served), "a call is missing or recorded twice"
    assert [r.seq for r in records] == list(range(len(served)))
    assert {r.api for r in records} == {preset.api}
    contexts: dict[str, TokenIds] = {}
    recorded: list[tuple[list[int], list[int]]] = []
    for record in records:
        assert record.status is CallStatus.OK, record.error
        assert record.prompt is not None and record.completion_token_ids is not None
        prompt = resolve_prompt(record.prompt, contexts.get)
        contexts[record.call_id] = prompt + record.completion_token_ids
        assert record.completion_logprobs is not None
        assert len(record.completion_logprobs) == len(record.completion_token_ids)
        recorded.append((prompt.to_list(), record.completion_token_ids.to_list()))
    # Exactly what the backend served, call for call (the order of concurrent calls may differ).
    witnessed = [(s.prompt_ids, s.generation.tokens) for s in served]
    assert sorted(recorded) == sorted(witnessed)

    # The session reconstructs faithfully; tree never trains a token twice.
    calls = resolve_calls(records)
    by_id = {c.call_id: c for c in calls}
    for strategy in ("prefix_merge", "tree"):
        rebuilt = get_strategy(strategy)(calls, StrategyContext(calls_reported=len(records)))
        assert check_segments(rebuilt.segments, by_id) == [], (name, strategy)
        assert rebuilt.stats.calls_used == len(records)
    tree = get_strategy("tree")(calls, StrategyContext()).segments
    trainable = sum(s.trainable_tokens for s in tree)
    assert trainable == sum(len(c.completion or []) for c in calls)
