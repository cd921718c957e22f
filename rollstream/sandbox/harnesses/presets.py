"""How to launch each real harness headless against rollstream (see ../shared/harnesses.md).

A preset is pure: given where the interceptor listens, the session id, the model and the
instruction, it says which command to run, with which environment and which config files in the
session's HOME. Running it is ``runner``'s job; the rollout node reuses the same presets.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rollstream.errors import ConfigurationError
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.schemas import ApiKind

#: The environment variable every preset passes the session id in (also the API key).
SESSION_ENV = "ROLLSTREAM_SESSION"
BASE_URL_ENV = "ROLLSTREAM_BASE_URL"
MODEL_ENV = "ROLLSTREAM_MODEL"


@dataclass(frozen=True)
class HarnessContext:
    """What one harness run is about."""

    base_url: str  # the interceptor's root URL, without /v1
    session: str
    model: str
    instruction: str
    #: Per-task parameters of presets that need them (``command``, ``python``), e.g. from the
    #: task's ``harness.*`` metadata; the npm harnesses ignore them.
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HarnessLaunch:
    """A command line, its extra environment, and files to write relative to HOME."""

    argv: list[str]
    env: dict[str, str]
    home_files: dict[str, str] = field(default_factory=dict)


class Preset(Protocol):
    """One harness: its name, the API it speaks and how it is launched."""

    name: str
    api: ApiKind

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """The launch of one run."""
        ...


def _env(ctx: HarnessContext, **extra: str) -> dict[str, str]:
    return {SESSION_ENV: ctx.session, BASE_URL_ENV: ctx.base_url, **extra}


class ClaudeCode:
    """Claude Code: Anthropic Messages, always streamed.

    As root it refuses to skip permissions unless told it runs in a sandbox (``IS_SANDBOX``).
    """

    name = "claude-code"
    api = ApiKind.ANTHROPIC_MESSAGES

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``claude -p``; the session id is the Anthropic API key."""
        argv = [str(executable), "-p", ctx.instruction, "--model", ctx.model]
        argv.append("--dangerously-skip-permissions")
        env = _env(
            ctx,
            ANTHROPIC_BASE_URL=ctx.base_url,
            ANTHROPIC_API_KEY=ctx.session,
            IS_SANDBOX="1",
            # No update checks or telemetry: runs are offline and must be reproducible.
            DISABLE_AUTOUPDATER="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        )
        return HarnessLaunch(argv, env)


class Codex:
    """Codex: OpenAI Responses, always streamed.

    It needs a provider entry (a base URL alone is ignored), given as ``-c`` overrides so
    nothing in HOME is needed.
    """

    name = "codex"
    api = ApiKind.RESPONSES

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``codex exec`` with a ``rollstream`` provider reading the key from the session env."""
        provider = {
            "name": "rollstream",
            "base_url": f"{ctx.base_url}/v1",
            "env_key": SESSION_ENV,
            "wire_api": "responses",
        }
        overrides = ['model_provider="rollstream"']
        overrides += [
            f"model_providers.rollstream.{k}={json.dumps(v)}" for k, v in provider.items()
        ]
        argv = [str(executable), "exec", "--skip-git-repo-check"]
        argv += ["--dangerously-bypass-approvals-and-sandbox", "-m", ctx.model]
        for override in overrides:
            argv += ["-c", override]
        argv.append(ctx.instruction)
        return HarnessLaunch(argv, _env(ctx))


class QwenCode:
    """Qwen Code: Chat Completions, always streamed, configured from the environment."""

    name = "qwen-code"
    api = ApiKind.CHAT_COMPLETIONS

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``qwen -p --yolo``; the session id is the OpenAI API key."""
        env = _env(
            ctx,
            OPENAI_BASE_URL=f"{ctx.base_url}/v1",
            OPENAI_API_KEY=ctx.session,
            OPENAI_MODEL=ctx.model,
        )
        return HarnessLaunch([str(executable), "-p", ctx.instruction, "--yolo"], env)


class Pi:
    """Pi: Chat Completions, always streamed; its provider is in ``~/.pi/agent/models.json``."""

    name = "pi"
    api = ApiKind.CHAT_COMPLETIONS

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``pi -p`` with a ``rollstream`` provider; ``apiKey`` names the env var to read."""
        model = {
            "id": ctx.model,
            "name": ctx.model,
            "reasoning": False,
            "input": ["text"],
            "contextWindow": 131072,
            "maxTokens": 4096,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        }
        provider = {
            "baseUrl": f"{ctx.base_url}/v1",
            "api": "openai-completions",
            "apiKey": SESSION_ENV,
            "models": [model],
        }
        models = json.dumps({"providers": {"rollstream": provider}}, indent=2)
        argv = [str(executable), "-p", "--provider", "rollstream", "--model", ctx.model]
        argv += ["--no-session", ctx.instruction]
        # PI_OFFLINE skips its start-up network calls (update and model list checks).
        return HarnessLaunch(argv, _env(ctx, PI_OFFLINE="1"), {".pi/agent/models.json": models})


class GeminiCli:
    """Gemini CLI: Google generateContent, streamed (``alt=sse``); settings in ``~/.gemini``.

    Its usage statistics (Clearcut, ``play.googleapis.com``) can only be switched off in
    ``settings.json``, not by environment; with them off it makes no call but the model's.
    """

    name = "gemini-cli"
    api = ApiKind.GEMINI

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``gemini -m MODEL --yolo -p``; the session id is the Gemini API key."""
        settings = {
            "security": {
                "auth": {"selectedType": "gemini-api-key"},
                # With folder trust on, a headless run in a new workspace exits 55.
                "folderTrust": {"enabled": False},
            },
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        }
        env = _env(
            ctx,
            # The SDK appends /v1beta itself.
            GOOGLE_GEMINI_BASE_URL=ctx.base_url,
            GEMINI_API_KEY=ctx.session,
            GEMINI_TELEMETRY_ENABLED="false",
        )
        argv = [str(executable), "-m", ctx.model, "--yolo", "-p", ctx.instruction]
        return HarnessLaunch(argv, env, {".gemini/settings.json": json.dumps(settings, indent=2)})


class OpenCode:
    """opencode: Chat Completions, always streamed; its provider in ``~/.config/opencode``.

    The instruction goes in on stdin, verbatim: given as an argument, opencode quotes any that
    holds a space. Its plugin package is seeded as installed, or it would start an npm install
    in the background at every run (no variable turns that off); ``--auto`` lets the tools act
    outside the workspace, which run mode otherwise refuses, ending the run early with exit 0.
    """

    name = "opencode"
    api = ApiKind.CHAT_COMPLETIONS
    #: Where the instruction is written, relative to HOME.
    INSTRUCTION_FILE = ".rollstream/instruction.txt"

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``opencode run --auto -m rollstream/MODEL < instruction`` through ``sh``."""
        limits = {"context": 131072, "output": 4096}
        provider = {
            "npm": "@ai-sdk/openai-compatible",  # bundled in the binary: nothing is fetched
            "name": "rollstream",
            "options": {"baseURL": f"{ctx.base_url}/v1", "apiKey": "{env:" + SESSION_ENV + "}"},
            "models": {ctx.model: {"name": ctx.model, "limit": limits}},
        }
        config = {"provider": {"rollstream": provider}, "autoupdate": False, "share": "disabled"}
        plugin = {"@opencode-ai/plugin": PACKAGES[self.name][0].rsplit("@", 1)[1]}
        files = {
            ".config/opencode/opencode.json": json.dumps(config, indent=2),
            ".config/opencode/package.json": json.dumps({"dependencies": plugin}),
            ".config/opencode/package-lock.json": json.dumps(
                {"lockfileVersion": 3, "packages": {"": {"dependencies": plugin}}}
            ),
            ".config/opencode/node_modules/.keep": "",
            self.INSTRUCTION_FILE: ctx.instruction,
        }
        script = 'exec "$0" run --auto -m "$1" < "$HOME/' + self.INSTRUCTION_FILE + '"'
        argv = ["sh", "-c", script, str(executable), f"rollstream/{ctx.model}"]
        env = _env(
            ctx,
            # Offline: no models.dev catalogue, no update check.
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_AUTOUPDATE="1",
        )
        return HarnessLaunch(argv, env, files)


class MiniSweAgent:
    """mini-swe-agent: Chat Completions through litellm, not streamed; one ``bash`` tool.

    A run ends when a command prints ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (its submit);
    an answer without a tool call is sent back as a format error. Without
    ``MSWEA_CONFIGURED`` it starts its set-up wizard, and without ``--exit-immediately`` it
    asks for a next task at the end (both exit 1 headless).
    """

    name = "mini-swe-agent"
    api = ApiKind.CHAT_COMPLETIONS

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``mini -y --exit-immediately`` on litellm's ``openai/MODEL`` at the interceptor."""
        argv = [str(executable), "-y", "--exit-immediately", "-m", f"openai/{ctx.model}"]
        argv += ["-c", "mini.yaml", "-c", f"model.model_kwargs.api_base={ctx.base_url}/v1"]
        env = _env(
            ctx,
            OPENAI_API_KEY=ctx.session,  # litellm's key for openai/ models
            MSWEA_CONFIGURED="true",
            # The served model has no price in litellm's table: not an error.
            MSWEA_COST_TRACKING="ignore_errors",
            MSWEA_SILENT_STARTUP="1",
            # litellm's bundled price table, not a download at import.
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        return HarnessLaunch([*argv, "-t", ctx.instruction], env)


class OpenHands:
    """The OpenHands agent (``openhands-sdk``): Chat Completions through litellm, not streamed.

    A library, not a program: its venv's Python runs rollstream's driver
    (``openhands_run.py``, beside this module), which builds the default agent on litellm's
    ``openai/MODEL`` at the interceptor. Its terminal runs commands in tmux.
    """

    name = "openhands"
    api = ApiKind.CHAT_COMPLETIONS
    DRIVER = Path(__file__).with_name("openhands_run.py")

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``python openhands_run.py INSTRUCTION`` with the venv's Python."""
        env = _env(
            ctx,
            **{MODEL_ENV: ctx.model},
            LITELLM_LOCAL_MODEL_COST_MAP="True",  # the bundled price table, not a download
            OPENHANDS_SUPPRESS_BANNER="1",
        )
        return HarnessLaunch([str(executable), str(self.DRIVER), ctx.instruction], env)


def _option(ctx: HarnessContext, preset_name: str, key: str) -> str:
    value = ctx.options.get(key, "").strip()
    if not value:
        raise ConfigurationError(
            f"the {preset_name} harness needs the option {key!r} (task metadata 'harness.{key}')"
        )
    return value


class Command:
    """Any command line, run by bash in the workspace; ``{instruction}`` is substituted quoted.

    ``executable`` is bash. Plain ``bash -c``, not a login shell: on Debian, /etc/profile resets
    PATH for root and would hide the node's virtualenv and tools from the command. The command
    reads the interceptor's URL and its API key (the session id) from the environment.
    """

    name = "command"
    api = ApiKind.CHAT_COMPLETIONS  # nominal: a command may speak any API the interceptor knows

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``bash -c COMMAND`` with ``{instruction}`` replaced by the shell-quoted instruction."""
        # str.replace, not str.format: command lines are full of braces (awk, jq, ${VAR}).
        command = _option(ctx, self.name, "command")
        command = command.replace("{instruction}", shlex.quote(ctx.instruction))
        return HarnessLaunch([str(executable), "-c", command], _env(ctx, **{MODEL_ENV: ctx.model}))


_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class Python:
    """An async Python function ``(base_url, session, instruction, workdir) -> int | None``.

    It runs in a child process (``rollstream.sandbox.harnesses.python_entry``), so timeouts and
    cancellation kill it like any other harness. ``executable`` is the Python to run it with.
    Option ``function`` is its import path ``module:function``; option ``pythonpath`` (``:``-
    separated) is prepended to the child's ``PYTHONPATH``, since the runner passes the node's
    own environment through only in part.
    """

    name = "python"
    api = ApiKind.CHAT_COMPLETIONS  # nominal, as for ``command``

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``python -m rollstream.sandbox.harnesses.python_entry module:function INSTRUCTION``."""
        function = _option(ctx, self.name, "function")
        if not _IMPORT_PATH.match(function):
            raise ConfigurationError(
                f"the python harness needs an import path module:function, not {function!r}"
            )
        argv = [str(executable), "-m", "rollstream.sandbox.harnesses.python_entry", function]
        env = _env(ctx, **{MODEL_ENV: ctx.model})
        if ctx.options.get("pythonpath"):
            env["PYTHONPATH"] = ctx.options["pythonpath"]
        return HarnessLaunch([*argv, ctx.instruction], env)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        ClaudeCode(),
        Codex(),
        QwenCode(),
        Pi(),
        GeminiCli(),
        OpenCode(),
        MiniSweAgent(),
        OpenHands(),
        Command(),
        Python(),
    )
}


def preset(name: str) -> Preset:
    """The preset called ``name``; a clear error naming the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigurationError(f"unknown harness {name!r}; known: {', '.join(PRESETS)}") from None
