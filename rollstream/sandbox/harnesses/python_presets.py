"""The presets of the harnesses from PyPI, each run from a venv of its own (python_install)."""

from __future__ import annotations

import json
from pathlib import Path

from rollstream.sandbox.harnesses.launch import MODEL_ENV, HarnessContext, HarnessLaunch, preset_env
from rollstream.schemas import ApiKind


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
        env = preset_env(
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


class _Driven:
    """A harness that is a library: its venv's Python runs rollstream's driver script for it.

    The driver (beside this module) reads the interceptor's URL, the session and the model from
    the preset's variables and calls litellm's ``openai/MODEL`` route.
    """

    api = ApiKind.CHAT_COMPLETIONS
    DRIVER: Path
    #: The harness's own switches (telemetry, banners).
    ENV: tuple[tuple[str, str], ...] = ()

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``python DRIVER INSTRUCTION`` with the venv's Python."""
        env = preset_env(
            ctx,
            **{MODEL_ENV: ctx.model},
            LITELLM_LOCAL_MODEL_COST_MAP="True",  # the bundled price table, not a download
            **dict(self.ENV),
        )
        return HarnessLaunch([str(executable), str(self.DRIVER), ctx.instruction], env)


class OpenHands(_Driven):
    """The OpenHands agent (``openhands-sdk``): Chat Completions through litellm, not streamed.

    Its driver (``openhands_run.py``) builds the default agent; its terminal runs commands in
    tmux.
    """

    name = "openhands"
    DRIVER = Path(__file__).with_name("openhands_run.py")
    ENV = (("OPENHANDS_SUPPRESS_BANNER", "1"),)


class Aider:
    """aider: Chat Completions through litellm, streamed; it offers the model no tools.

    The model answers in an edit format (``whole``: a file's name, then its whole content in a
    fence) that aider applies itself; it runs no command the model suggests. A run is one
    instruction (``--message``) and the reflections that follow it: with a task's ``test``
    option, a failing test's output goes back to the model (up to three times). Its price and
    context table, update check and analytics would go to the network: a local model entry
    (``.aider.model.metadata.json``) and its switches keep it offline; its history files go to
    HOME, not the workspace.
    """

    name = "aider"
    api = ApiKind.CHAT_COMPLETIONS
    #: What keeps a headless run in the workspace and off the network (each measured).
    FLAGS = (
        "--yes-always",
        "--no-git",
        "--no-auto-commits",
        "--analytics-disable",
        "--no-check-update",
        "--no-show-release-notes",
        "--no-show-model-warnings",
        "--no-detect-urls",
        "--no-pretty",
        "--no-fancy-input",
        "--edit-format",
        "whole",
        "--map-tokens",
        "0",
    )

    def launch(self, ctx: HarnessContext, executable: Path) -> HarnessLaunch:
        """``aider --message INSTRUCTION`` on litellm's ``openai/MODEL`` at the interceptor."""
        model = f"openai/{ctx.model}"
        argv = [*self.FLAGS, "--model", model, "--openai-api-base", f"{ctx.base_url}/v1"]
        if ctx.options.get("test"):
            argv += ["--test-cmd", ctx.options["test"], "--auto-test"]
        # The history files' paths name HOME, which the runner sets: the shell expands it.
        script = (
            'exec "$0" "$@" --chat-history-file "$HOME/.aider.chat.history.md"'
            ' --input-history-file "$HOME/.aider.input.history"'
        )
        metadata = {
            model: {
                "max_input_tokens": 262144,
                "max_output_tokens": 8192,
                "max_tokens": 8192,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
        env = preset_env(ctx, OPENAI_API_KEY=ctx.session, LITELLM_LOCAL_MODEL_COST_MAP="True")
        return HarnessLaunch(
            ["sh", "-c", script, str(executable), *argv, "--message", ctx.instruction],
            env,
            {".aider.model.metadata.json": json.dumps(metadata)},
        )


class Terminus2(_Driven):
    """Harbor's Terminus-2 agent (``harbor``): Chat Completions through litellm, not streamed.

    It offers the model no tools: each answer is a JSON object (analysis, plan, the keystrokes
    to type into its tmux terminal, task_complete), and a run ends when two answers in a row
    mark the task complete. Harbor runs agents in containers of its own; the driver
    (``terminus2_run.py``) gives it the session's sandbox instead.
    """

    name = "terminus-2"
    DRIVER = Path(__file__).with_name("terminus2_run.py")
    ENV = (("HARBOR_TELEMETRY", "0"),)
