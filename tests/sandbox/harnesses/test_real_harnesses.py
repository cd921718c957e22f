"""The real npm harnesses, headless, through the interceptor to the reference backend.

Each one must finish a multi-turn tool task (write a file with a shell tool, read it back,
answer), exit 0, and leave every one of its LLM calls in Kafka with exactly the token ids and
logprobs the backend served. The backend is the witness: a wrapper around its policy notes what
it served, independently of the interceptor.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, get_strategy
from rollstream.dev.backend.policies.base import Generation, GenerationRequest, Policy
from rollstream.dev.backend.policies.scenarios import ScenarioFile
from rollstream.dev.backend.policies.scripted import ScriptedGeneration, ScriptedPolicy
from rollstream.dev.bench.fidelity_serving import OPTIONS_OF, scenario_turns, task_of
from rollstream.interceptor.proxy import Interceptor
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS
from rollstream.sandbox.harnesses.python_install import PYTHON_PACKAGES, python_executable
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.schemas import Caller, CallRecord, CallStatus, TopicNames, resolve_prompt
from rollstream.schemas.packed import TokenIds
from rollstream.settings import KafkaSettings, StatePaths
from tests.harness_stack import MODEL, harnesses_installed, register, scripted_interceptor
from tests.kafka_reading import read_records

pytestmark = pytest.mark.integration
TASK = "Create hello.txt with polar."


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
    return harnesses_installed()


@dataclass
class Stack:
    interceptor: Interceptor
    witness: WitnessPolicy


StackFactory = Callable[[Path | None], AbstractAsyncContextManager[Stack]]


@pytest.fixture
def make_stack(
    kafka_settings: KafkaSettings, rollstream_topics: TopicNames, tmp_path: Path
) -> StackFactory:
    """An interceptor in front of the witnessed scripted backend, playing ``scenarios``
    (default: the solve scenario)."""

    @asynccontextmanager
    async def make(scenarios: Path | None) -> AsyncIterator[Stack]:
        witnesses: list[WitnessPolicy] = []

        def witness(tokenizer: ChatTokenizer, file: ScenarioFile) -> Policy:
            witnesses.append(WitnessPolicy(ScriptedPolicy(tokenizer, file)))
            return witnesses[-1]

        async with scripted_interceptor(
            kafka_settings, tmp_path / "state", witness, scenarios=scenarios
        ) as interceptor:
            yield Stack(interceptor, witnesses[0])

    return make


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


@pytest.mark.parametrize("name", list(PACKAGES))
async def test_harness_completes_a_tool_task_and_every_call_is_captured(
    name: str,
    harness_bin: Path,
    make_stack: StackFactory,
    kafka_settings: KafkaSettings,
    tmp_path: Path,
) -> None:
    async with make_stack(None) as stack:
        await _run_and_check(
            name, harness_bin / PACKAGES[name][1], TASK, stack, kafka_settings, tmp_path
        )


@pytest.mark.prebuilt("python-harnesses")
@pytest.mark.parametrize("name", list(PYTHON_PACKAGES))
async def test_python_harness_completes_a_tool_task_and_every_call_is_captured(
    name: str, make_stack: StackFactory, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    executable = python_executable(name, StatePaths().cache_dir)
    assert executable is not None, "the set-up installs the Python harnesses"
    # mini-swe-agent's task names its submit scenario, aider's its own (it offers no tools).
    async with make_stack(None) as stack:
        await _run_and_check(
            name, executable, task_of("reference", name), stack, kafka_settings, tmp_path
        )


async def _run_and_check(
    name: str,
    executable: Path,
    task: str,
    stack: Stack,
    kafka_settings: KafkaSettings,
    tmp_path: Path,
) -> None:
    """Run harness ``name`` on ``task``; every call recorded as served, faithful to rebuild."""
    preset = PRESETS[name]
    session = f"{name}-{uuid.uuid4().hex[:8]}"
    register(stack.interceptor, session)  # as the node does before it launches a harness
    ctx = HarnessContext(stack.interceptor.url, session, MODEL, task, OPTIONS_OF.get(name, {}))
    launch = preset.launch(ctx, executable)
    workdir = tmp_path / "work"
    result = await run_harness(launch, tmp_path / "home", workdir, tmp_path / "logs", 240)

    assert result.exit_code == 0, f"{name} failed:\n{result.stdout_tail}\n{result.stderr_tail}"
    assert (workdir / "hello.txt").read_text() == "polar\n"
    assert "Done." in result.stdout_tail
    served = stack.witness.served
    # At least one call per scripted turn; Claude Code adds a side call.
    assert len(served) >= scenario_turns(name)

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
    # Who is calling, as each harness names itself (interceptor/callers.py): Claude Code, Codex,
    # opencode, Kilo and OpenHands say their own session on every call; the OpenAI SDK's only
    # a retry count.
    callers = {r.caller for r in records}
    if name in ("claude-code", "codex", "opencode", "kilo", "openhands"):
        [caller] = callers  # one session, one thread: the same on every call
        assert caller is not None and caller.session, caller
        assert caller.session != session  # the harness's own id, not rollstream's
        assert (caller.agent, caller.parent) == (None, None)  # the main thread
    elif name in ("qwen-code", "pi", "mini-swe-agent", "aider", "terminus-2"):  # OpenAI SDK's
        assert callers == {Caller(retry=0)}
    else:
        assert callers == {None}, callers
