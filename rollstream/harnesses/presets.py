"""How to launch each real harness headless against rollstream (see ../shared/harnesses.md).

A preset is pure: given where the interceptor listens, the session id, the model and the
instruction, it says which command to run, with which environment and which config files in the
session's HOME. Running it is ``runner``'s job; the rollout node reuses the same presets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rollstream.errors import ConfigurationError
from rollstream.schemas import ApiKind

#: The environment variable every preset passes the session id in (also the API key).
SESSION_ENV = "ROLLSTREAM_SESSION"
BASE_URL_ENV = "ROLLSTREAM_BASE_URL"


@dataclass(frozen=True)
class HarnessContext:
    """What one harness run is about."""

    base_url: str  # the interceptor's root URL, without /v1
    session: str
    model: str
    instruction: str


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


PRESETS: dict[str, Preset] = {p.name: p for p in (ClaudeCode(), Codex(), QwenCode(), Pi())}


def preset(name: str) -> Preset:
    """The preset called ``name``; a clear error naming the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigurationError(f"unknown harness {name!r}; known: {', '.join(PRESETS)}") from None
