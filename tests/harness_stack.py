"""The scripted reference backend behind an interceptor, as the real-harness tests use it."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import pytest
from aiohttp.test_utils import TestServer
from pydantic import SecretStr

from rollstream.dev.backend.policies.base import Policy
from rollstream.dev.backend.policies.scenarios import ScenarioFile, load_scenarios
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.bench.fidelity_serving import MODEL as MODEL
from rollstream.dev.bench.fidelity_serving import SCENARIOS, TASK, write_scenarios
from rollstream.dev.engine.serve import EngineServer
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.sandbox.harnesses.install import PACKAGES, install
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS
from rollstream.sandbox.harnesses.runner import run_harness
from rollstream.sandbox.runtime import Runtime
from rollstream.schemas import CallRecord, TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.conftest import JAR_CACHE
from tests.kafka_reading import read_records
from tests.loaded_families import loaded_family

#: Write hello.txt with the shell tool, read it back, answer: the fidelity bench's task.
SOLVE_SCENARIOS = SCENARIOS
PolicyFactory = Callable[[ChatTokenizer, ScenarioFile], Policy]


def harnesses_installed() -> Path:
    """The harnesses' bin folder (installed by `make test` already); skip without npm."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the real harnesses cannot be installed")
    return install(JAR_CACHE)


@asynccontextmanager
async def scripted_interceptor(
    kafka: KafkaSettings,
    state_dir: Path,
    policy: PolicyFactory | None = None,
    context: Literal["ordinary", "exact"] = "ordinary",
    family: str | None = None,
    admin_token: str | None = None,
    strict: bool = False,
    scenarios: Path | None = None,
    tpot_ms: float = 0.0,
) -> AsyncIterator[Interceptor]:
    """An interceptor (free ports) in front of the scripted backend serving SOLVE_SCENARIOS
    (or the file ``scenarios``), sampling a token each ``tpot_ms``.

    It has the backend's own tokenizer (and ``family``: the toy model's generic one unless
    named), so sessions may choose exact context; ``context="exact"`` makes it the default.
    ``admin_token`` guards its admin port; ``strict`` accepts registered sessions only.
    """
    scenarios = scenarios or write_scenarios(state_dir)
    served = loaded_family(family) if family else None
    folder = served.tokenizer.path if served else default_tokenizer_dir()
    tokenizer = served.tokenizer if served else ChatTokenizer(folder)
    # The harnesses' system prompts and tool lists are long in this small vocabulary
    # (Claude Code: 64k tokens), so the context is made large enough.
    settings = BackendSettings(
        policy="scripted",
        scenarios=scenarios,
        model=MODEL,
        max_model_len=262144,
        tpot_ms=tpot_ms,
    )
    chosen = policy(tokenizer, load_scenarios(scenarios)) if policy else None
    backend = Backend(settings, None if served else tokenizer, chosen, family=served)
    server = TestServer(backend.app(), host="127.0.0.1")
    await server.start_server()
    interceptor = Interceptor(
        InterceptorSettings(
            upstream=str(server.make_url("")).rstrip("/"),
            port=0,
            admin_port=0,
            upstream_model=MODEL,
            context=context,
            tokenizer=folder,
            family=family,
            admin_token=None if admin_token is None else SecretStr(admin_token),
            strict_sessions=strict,
        ),
        kafka,
        PublisherSettings(),
        StatePaths(state_dir=state_dir, cache_dir=JAR_CACHE),
    )
    await interceptor.start()
    try:
        yield interceptor
    finally:
        await interceptor.stop()
        await server.close()


@asynccontextmanager
async def engine_interceptor(
    kafka: KafkaSettings,
    state_dir: Path,
    server: EngineServer,
    family: str | None,
    context: Literal["ordinary", "exact"] = "ordinary",
    strict: bool = False,
    tokenizer: Path | None = None,
) -> AsyncIterator[Interceptor]:
    """An interceptor (free ports) in front of a real vLLM serving ``family``'s tiny model.

    No family with a ``tokenizer`` folder: the generic family, the folder's own template.
    """
    interceptor = Interceptor(
        InterceptorSettings(
            upstream=server.url,
            port=0,
            admin_port=0,
            upstream_model=server.model,
            context=context,
            family=family,
            tokenizer=tokenizer,
            strict_sessions=strict,
        ),
        kafka,
        PublisherSettings(),
        StatePaths(state_dir=state_dir, cache_dir=JAR_CACHE),
    )
    await interceptor.start()
    try:
        yield interceptor
    finally:
        await interceptor.stop()


async def solve_session(
    name: str,
    interceptor: Interceptor,
    kafka: KafkaSettings,
    harness_bin: Path,
    tmp: Path,
    runtime: Runtime | None = None,
    task: str = TASK,
    options: dict[str, str] | None = None,
) -> list[CallRecord]:
    """Run harness ``name`` on the hello.txt task through ``interceptor``; its records, by seq.

    The harness must exit 0 having written the file and said "Done.". It runs as a process of
    its own, or in a session of ``runtime`` (a container of the docker runtime). ``options``
    are the task's ``harness.*`` options.
    """
    session = f"{name}-{uuid.uuid4().hex[:8]}"
    register(interceptor, session)  # as the node does before it launches a harness
    ctx = HarnessContext(interceptor.url, session, MODEL, task, dict(options or {}))
    launch = PRESETS[name].launch(ctx, harness_bin / PACKAGES[name][1])
    if runtime is None:
        workdir = tmp / "work"
        result = await run_harness(launch, tmp / "home", workdir, tmp / "logs", 240)
    else:
        sandbox = await runtime.start(session)
        workdir = sandbox.work
        result = await runtime.execute(sandbox, launch, 240, sandbox.logs / "harness")
    assert result.exit_code == 0, f"{name} failed:\n{result.stdout_tail}\n{result.stderr_tail}"
    assert (workdir / "hello.txt").read_text() == "polar\n"
    assert "Done." in result.stdout_tail
    if runtime is not None:
        await runtime.stop(sandbox)
    records = await read_records(
        kafka,
        TopicNames(kafka.topic_prefix).events,
        CallRecord,
        3,
        where=lambda r: r.session_id == session,
        timeout=30,
        settle_s=1.0,
    )
    return sorted(records, key=lambda r: r.seq)


def register(interceptor: Interceptor, *sessions: str) -> None:
    """Register ``sessions`` as their launcher does (the node, on the admin port).

    A registered key is recorded as its session id; outside strict mode any other key is
    recorded only as its keyed hash (``keyed_session``), which tests that name their
    sessions by key would not find.
    """
    for session in sessions:
        interceptor.addon.sessions.register(session, None)
