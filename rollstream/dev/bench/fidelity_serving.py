"""What serves the fidelity matrix: the task, the scripted plan and the upstreams.

The reference backend serves every family in this process; a real vLLM (``--engine vllm``) serves
each family the engine knows on its tiny model, playing the same solve scenario (the engine's
default scenarios; the task names it). An interceptor on free ports goes in front of either.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from aiohttp import web

from rollstream.dev.backend.policies import default_scenarios_path
from rollstream.dev.backend.policies.scenarios import ScenarioFile
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.bench.engine_upstream import vllm_upstream
from rollstream.interceptor.proxy import Interceptor
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.models.families import FAMILIES
from rollstream.models.family import Family
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.sandbox.harnesses.executables import resolve_executable
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.python_install import PYTHON_PACKAGES
from rollstream.settings import KafkaSettings, StatePaths

Mode = Literal["ordinary", "exact"]
Engine = Literal["reference", "vllm"]
MODES: tuple[Mode, ...] = ("ordinary", "exact")
MODEL = "rollstream-tiny"
TASK = "Create hello.txt with polar."
#: The shipped scenarios the matrix plays (the engine's plan holds them all): solve (write
#: hello.txt with the shell tool, read it back, answer), and each where a harness needs its own.
PLAYED = ("solve", "submit", "aider", "terminus-2")


def _played() -> str:
    shipped = yaml.safe_load(Path(default_scenarios_path()).read_text())
    shipped["scenarios"] = [s for s in shipped["scenarios"] if s["name"] in PLAYED]
    return str(yaml.safe_dump(shipped, sort_keys=False))


SCENARIOS = _played()
#: The scenario a harness plays where it is not solve: mini-swe-agent ends a run by submitting
#: (a command printing its marker); an answer without a command is a format error to it.
#: aider and Terminus-2 offer no tools: aider writes the file from an edit in the answer's text
#: (the first one wrong, and its test's failure is the turn that goes back to the model);
#: Terminus-2 types the commands an answer's JSON gives into its terminal.
SCENARIO_OF = {"mini-swe-agent": "submit", "aider": "aider", "terminus-2": "terminus-2"}
#: The task's check, as a harness that runs it itself takes it (aider's ``--test-cmd``).
CHECK = 'grep -qx polar hello.txt || { echo "hello.txt does not hold polar"; exit 1; }'
#: Preset options a harness's task gives (HarnessContext.options).
OPTIONS_OF = {"aider": {"test": CHECK}}


@dataclass(frozen=True)
class FidelityBenchConfig:
    """What one run covers."""

    families: tuple[str, ...] = tuple(FAMILIES)
    harnesses: tuple[str, ...] = (*PACKAGES, *PYTHON_PACKAGES)
    modes: tuple[Mode, ...] = MODES
    #: What serves the families: the reference backend (every family) or a real vLLM (the
    #: families the engine serves, each on its tiny model).
    engine: Engine = "reference"
    timeout_s: float = 180.0  # per harness run; a normal run takes seconds
    read_timeout_s: float = 30.0  # for the session's records to be readable in Kafka
    # The harnesses' system prompts and tool lists are long (Claude Code's: tens of thousands
    # of tokens), so the served context is made large enough for any of them.
    max_model_len: int = 262144


def write_scenarios(state_dir: Path) -> Path:
    """The solve scenario as a file in ``state_dir`` (made if missing), for a scripted backend."""
    state_dir.mkdir(parents=True, exist_ok=True)
    scenarios = state_dir / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    return scenarios


@asynccontextmanager
async def reference_upstream(
    family_name: str, family: Family, state_dir: Path, config: FidelityBenchConfig
) -> AsyncIterator[tuple[str, str]]:
    """The scripted reference backend serving ``family`` on a free port: (its URL, its model)."""
    scenarios = write_scenarios(state_dir)
    settings = BackendSettings(
        policy="scripted", scenarios=scenarios, model=MODEL, max_model_len=config.max_model_len
    )
    runner = web.AppRunner(Backend(settings, family=family).app(), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", MODEL
    finally:
        await runner.cleanup()


@asynccontextmanager
async def engine_upstream(
    family_name: str, family: Family, state_dir: Path, config: FidelityBenchConfig
) -> AsyncIterator[tuple[str, str]]:
    """A real vLLM serving ``family``'s tiny model (the task names the scenario it plays)."""
    async with vllm_upstream(family_name) as server:
        yield server.url, server.model


#: What serves a family for the matrix: (family name, family, state folder, config) -> an async
#: context of (upstream URL, the model name it serves).
Upstream = Callable[
    [str, Family, Path, FidelityBenchConfig], AbstractAsyncContextManager[tuple[str, str]]
]
UPSTREAMS: dict[Engine, Upstream] = {"reference": reference_upstream, "vllm": engine_upstream}


def executable_of(harness: str, bin_dir: Path) -> Path:
    """The npm install's executable of ``harness`` (in ``bin_dir``), or its own venv's."""
    if harness in PACKAGES:
        return bin_dir / PACKAGES[harness][1]
    return resolve_executable(harness, StatePaths().cache_dir)


def scenario_turns(harness: str) -> int:
    """How many calls the harness's scenario makes at least: one per turn."""
    name = SCENARIO_OF.get(harness, "solve")
    return len(ScenarioFile.model_validate(yaml.safe_load(SCENARIOS)).by_name(name).turns)


def task_of(engine: Engine, harness: str | None = None) -> str:
    """The harness's task, naming the scenario it plays where the upstream needs to be told.

    On vLLM the engine's plan reads ``[scenario=NAME]``; the reference backend draws solve
    unless the task names another (``[scenario: NAME]``).
    """
    scenario = SCENARIO_OF.get(harness or "", "solve")
    if engine == "vllm":
        return f"[scenario={scenario}] {TASK}"
    return TASK if scenario == "solve" else f"[scenario: {scenario}] {TASK}"


@asynccontextmanager
async def served(
    family_name: str,
    family: Family,
    mode: Mode,
    kafka: KafkaSettings,
    state_dir: Path,
    upstream: tuple[str, str],
) -> AsyncIterator[Interceptor]:
    """An interceptor on free ports in front of ``upstream`` (its URL and served model)."""
    url, served_model = upstream
    interceptor = Interceptor(
        InterceptorSettings(
            upstream=url,
            port=0,
            admin_port=0,
            upstream_model=served_model,
            context=mode,
            tokenizer=family.tokenizer.path,
            family=family_name,
        ),
        kafka,
        PublisherSettings(),
        StatePaths(state_dir=state_dir),
    )
    try:
        await interceptor.start()
    except BaseException:
        with contextlib.suppress(Exception):  # whatever had started before the failure
            await interceptor.stop()
        raise
    try:
        yield interceptor
    finally:
        await interceptor.stop()
