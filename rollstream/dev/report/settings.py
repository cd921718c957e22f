"""Settings of ``rollstream report`` (``ROLLSTREAM_REPORT_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ReportSettings(BaseSettings):
    """Which tokenizer decodes the tokens, and how much of a run one page shows."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_REPORT_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    tokenizer: Path | None = Field(
        default=None,
        description="Tokenizer folder of the served model. Default: the one shipped with "
        "rollstream (the reference backend's).",
    )
    max_trajectories: int = Field(
        default=100,
        ge=1,
        description="Trajectories shown token by token (the first read); the others count in "
        "the summary and the group table only.",
    )
    tokens_per_segment: int = Field(
        default=4000,
        ge=2,
        description="Tokens shown per segment: the first and last halves of a longer segment, "
        "with a note saying how many were left out.",
    )
