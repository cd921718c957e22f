"""Settings of the reference backend (``ROLLSTREAM_BACKEND_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.settings import BearerToken


class BackendSettings(BaseSettings):
    """How ``rollstream backend`` serves: address, model family, tokenizer, policy, latency."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_BACKEND_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8000, ge=0, le=65535, description="Port (0: any free port).")
    model: str = Field(default="rollstream-tiny", description="The served model name.")
    admin_token: BearerToken = Field(
        default=None,
        description="Bearer token /admin/weights requires (reading and loading the policy's "
        "weights); inference stays open. Unset: open, with a warning at start.",
    )
    tokenizer: Path | None = Field(
        default=None,
        description="A Hugging Face tokenizer folder. Default: the family's vocabulary from the "
        "cache, or the shipped toy one without a family.",
    )
    family: str | None = Field(
        default=None,
        description="The served model family, whose renderer and parsers write prompts and read "
        "answers (`rollstream models families`), or generic: the tokenizer folder's own chat "
        "template, hermes tool calls. Default: generic.",
    )
    policy: Literal["tiny", "scripted", "hf"] = Field(
        default="tiny",
        description="tiny (numpy LM), scripted (scenarios) or hf (a transformers model; torch).",
    )
    scenarios: Path | None = Field(
        default=None, description="Scenario YAML of the scripted policy. Default: the shipped one."
    )
    scripted_logprobs: Literal["scripted", "tiny"] = Field(
        default="scripted",
        description="The scripted policy's logprobs: its own draws, or the tiny model's for the "
        "script's tokens (teacher-forced; what the example trainer updates).",
    )
    hf_model: Path | None = Field(
        default=None, description="A transformers model folder for the hf policy."
    )
    seed: int = Field(default=0, description="Seed of the policy's weights and scenario draws.")
    max_model_len: int = Field(default=32768, ge=16, description="Context length in tokens.")
    ttft_ms: float = Field(default=0.0, ge=0, description="Time to first token, fixed part (ms).")
    prefill_us_per_token: float = Field(
        default=0.0, ge=0, description="Time to first token per prompt token (microseconds)."
    )
    tpot_ms: float = Field(default=0.0, ge=0, description="Time per output token (ms).")
