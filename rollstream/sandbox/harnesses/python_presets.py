"""The presets of the harnesses from PyPI, each run from a venv of its own (python_install)."""

from __future__ import annotations

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
        env = preset_env(
            ctx,
            **{MODEL_ENV: ctx.model},
            LITELLM_LOCAL_MODEL_COST_MAP="True",  # the bundled price table, not a download
            OPENHANDS_SUPPRESS_BANNER="1",
        )
        return HarnessLaunch([str(executable), str(self.DRIVER), ctx.instruction], env)
