"""How to launch each real harness headless against rollstream (see ../shared/harnesses.md).

A preset is pure: given where the interceptor listens, the session id, the model and the
instruction, it says which command to run, with which environment and which config files in the
session's HOME. Running it is ``runner``'s job; the rollout node reuses the same presets.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import ClassVar

from rollstream.errors import ConfigurationError
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.launch import (
    MODEL_ENV,
    SESSION_ENV,
    HarnessContext,
    HarnessLaunch,
    Preset,
    preset_env,
)
from rollstream.sandbox.harnesses.python_presets import Aider, MiniSweAgent, OpenHands, Terminus2
from rollstream.schemas import ApiKind


class ClaudeCode:
    """Claude Code: Anthropic Messages, always streamed.

    As root it refuses to skip permissions unless told it runs in a sandbox (``IS_SANDBOX``).
    """

    name = "claude-code"
    api = ApiKind.ANTHROPIC_MESSAGES

    #: The smallest auto-compact window it takes (CLAUDE_CODE_AUTO_COMPACT_WINDOW, tokens).
    MIN_COMPACT_WINDOW = 100_000

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``claude -p``; the session id is the Anthropic API key.

        The task option ``compact_at`` (tokens) is where it compacts its history: its
        auto-compact window, and below that window's floor a percentage of it.
        """
        argv = [str(executable), "-p", ctx.instruction, "--model", ctx.model]
        argv.append("--dangerously-skip-permissions")
        compacting: dict[str, str] = {}
        at = _int_option(ctx, self.name, "compact_at")
        if at is not None:
            window = max(at, self.MIN_COMPACT_WINDOW)
            compacting["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(window)
            compacting["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] = f"{100 * at / window:g}"
        env = preset_env(
            ctx,
            ANTHROPIC_BASE_URL=ctx.base_url,
            ANTHROPIC_API_KEY=ctx.session,
            IS_SANDBOX="1",
            # No update checks or telemetry: runs are offline and must be reproducible.
            DISABLE_AUTOUPDATER="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            **compacting,
        )
        return HarnessLaunch(argv, env)


class Codex:
    """Codex: OpenAI Responses, always streamed.

    It needs a provider entry (a base URL alone is ignored), given as ``-c`` overrides so
    nothing in HOME is needed. The task option ``transport`` is ``http`` (the default) or
    ``websocket``: the Responses API over one WebSocket per thread, as Codex speaks to OpenAI
    (the interceptor ends it, ``interceptor/websocket``).
    """

    TRANSPORTS = ("http", "websocket")

    name = "codex"
    api = ApiKind.RESPONSES

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``codex exec`` with a ``rollstream`` provider reading the key from the session env."""
        provider: dict[str, object] = {
            "name": "rollstream",
            "base_url": f"{ctx.base_url}/v1",
            "env_key": SESSION_ENV,
            "wire_api": "responses",
        }
        transport = ctx.options.get("transport", "").strip() or "http"
        if transport not in self.TRANSPORTS:
            raise ConfigurationError(
                f"the codex harness's option transport must be one of {', '.join(self.TRANSPORTS)}"
                f", not {transport!r}"
            )
        if transport == "websocket":
            provider["supports_websockets"] = True
        overrides = ['model_provider="rollstream"']
        overrides += [
            f"model_providers.rollstream.{k}={json.dumps(v)}" for k, v in provider.items()
        ]
        compact_at = _int_option(ctx, self.name, "compact_at")
        if compact_at is not None:  # where it compacts its history (tokens)
            overrides.append(f"model_auto_compact_token_limit={compact_at}")
        argv = [str(executable), "exec", "--skip-git-repo-check"]
        argv += ["--dangerously-bypass-approvals-and-sandbox", "-m", ctx.model]
        for override in overrides:
            argv += ["-c", override]
        argv.append(ctx.instruction)
        return HarnessLaunch(argv, preset_env(ctx))


class QwenCode:
    """Qwen Code: Chat Completions, always streamed, configured from the environment."""

    name = "qwen-code"
    api = ApiKind.CHAT_COMPLETIONS

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``qwen -p --yolo``; the session id is the OpenAI API key."""
        env = preset_env(
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
        return HarnessLaunch(
            argv, preset_env(ctx, PI_OFFLINE="1"), {".pi/agent/models.json": models}
        )


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
        env = preset_env(
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
    CONFIG_DIR = ".config/opencode"
    CONFIG_NAME = "opencode.json"
    #: The answers' limit (tokens) it is told.
    OUTPUT_LIMIT = 4096
    #: Offline: no models.dev catalogue, no update check.
    OFFLINE_ENV: ClassVar[dict[str, str]] = {
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    }

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``NAME run --auto -m rollstream/MODEL < instruction`` through ``sh``.

        It compacts its history once a call's prompt and answer reach the model's context less
        the answer's limit (4096): the task option ``compact_at`` (tokens) sets the context it
        is told so that this happens there (default: a context of 131072).
        """
        compact_at = _int_option(ctx, self.name, "compact_at") or 131072 - self.OUTPUT_LIMIT
        limits = {"context": compact_at + self.OUTPUT_LIMIT, "output": self.OUTPUT_LIMIT}
        provider = {
            "npm": "@ai-sdk/openai-compatible",  # bundled in the binary: nothing is fetched
            "name": "rollstream",
            "options": {"baseURL": f"{ctx.base_url}/v1", "apiKey": "{env:" + SESSION_ENV + "}"},
            "models": {ctx.model: {"name": ctx.model, "limit": limits}},
        }
        config = {"provider": {"rollstream": provider}, "autoupdate": False, "share": "disabled"}
        files = {
            f"{self.CONFIG_DIR}/{self.CONFIG_NAME}": json.dumps(self.configured(config), indent=2),
            **self.seeds(),
            self.INSTRUCTION_FILE: ctx.instruction,
        }
        script = 'exec "$0" run --auto -m "$1" < "$HOME/' + self.INSTRUCTION_FILE + '"'
        argv = ["sh", "-c", script, str(executable), f"rollstream/{ctx.model}"]
        return HarnessLaunch(argv, preset_env(ctx, **self.OFFLINE_ENV), files)

    def configured(self, config: dict[str, object]) -> dict[str, object]:
        """The config file's content: opencode's is the provider's."""
        return config

    def seeds(self) -> dict[str, str]:
        """Files that show the plugin package installed (relative to HOME)."""
        plugin = {"@opencode-ai/plugin": PACKAGES[self.name][0].rsplit("@", 1)[1]}
        lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": plugin}}}
        return {
            f"{self.CONFIG_DIR}/package.json": json.dumps({"dependencies": plugin}),
            f"{self.CONFIG_DIR}/package-lock.json": json.dumps(lock),
            f"{self.CONFIG_DIR}/node_modules/.keep": "",
        }


class KiloCode(OpenCode):
    """Kilo Code's CLI, built on opencode: the same provider, run and stdin, its own names.

    It installs no plugin in the background; offline it needs its provider list limited to
    ours (or it asks its gateway for models) and telemetry off. Without ``--auto`` a tool
    touching a path outside the workspace ends the run with exit 1.
    """

    name = "kilo"
    CONFIG_DIR = ".config/kilo"
    CONFIG_NAME = "kilo.json"
    OFFLINE_ENV: ClassVar[dict[str, str]] = {
        "KILO_DISABLE_MODELS_FETCH": "1",
        "KILO_DISABLE_AUTOUPDATE": "1",
        "KILO_TELEMETRY_LEVEL": "off",
    }

    def configured(self, config: dict[str, object]) -> dict[str, object]:
        """The provider's config, the only provider enabled."""
        return config | {"enabled_providers": ["rollstream"]}

    def seeds(self) -> dict[str, str]:
        """None needed."""
        return {}


def _int_option(ctx: HarnessContext, preset_name: str, key: str) -> int | None:
    """The option ``key`` as a positive integer, or None when it is unset (or only spaces)."""
    value = ctx.options.get(key, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigurationError(
            f"the {preset_name} harness's option {key} must be a positive integer, not {value!r}"
        )
    return int(value)


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
        return HarnessLaunch(
            [str(executable), "-c", command], preset_env(ctx, **{MODEL_ENV: ctx.model})
        )


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
        env = preset_env(ctx, **{MODEL_ENV: ctx.model})
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
        KiloCode(),
        MiniSweAgent(),
        OpenHands(),
        Aider(),
        Terminus2(),
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
