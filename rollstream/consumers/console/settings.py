"""Settings of ``rollstream console`` (``ROLLSTREAM_CONSOLE_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class ConsoleSettings(BaseSettings):
    """Where the console listens, who may read and who may act, what it keeps in memory."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_CONSOLE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8470, ge=0, le=65535, description="Port (0: any free one).")
    token: SecretStr | None = Field(
        default=None,
        description="Bearer token to read the console. Default: one is generated at start and "
        "printed in the console's URL.",
    )
    control_token: SecretStr | None = Field(
        default=None,
        description="Bearer token that may also act (pause and resume capture, replay, "
        "export). Default: none, the console is read-only.",
    )
    interceptors: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Admin URLs of the interceptors (or pools) to show and to pause, "
        "comma-separated, e.g. http://127.0.0.1:9091.",
    )
    admin_token: SecretStr | None = Field(
        default=None, description="Bearer token of those interceptors' admin ports."
    )
    tokenizer: Path | None = Field(
        default=None,
        description="Tokenizer folder of the served model, to show tokens as text. Default: "
        "the one shipped with rollstream (the reference backend's).",
    )
    max_sessions: int = Field(
        default=200_000,
        ge=1,
        description="Sessions kept in memory (their facts, not their records); the oldest "
        "ended ones are forgotten first.",
    )
    max_calls: int = Field(
        default=2_000_000,
        ge=1,
        description="Calls whose facts are kept for the timeline, about 340 bytes each, in all "
        "sessions together: past it the oldest ended sessions are forgotten, then running "
        "sessions keep their newest calls, an even share of it.",
    )
    max_indexed: int = Field(
        default=1_000_000,
        ge=1,
        description="Trajectories whose place in their topic is remembered, so the viewer "
        "reads one record from Kafka when it is opened; older ones are forgotten.",
    )
    max_groups: int = Field(
        default=100_000,
        ge=1,
        description="GRPO groups kept (their members' rewards); the oldest are forgotten first.",
    )
    rate_window_s: float = Field(
        default=10.0, gt=0, description="Window of the calls/s and tokens/s figures."
    )
    history_s: int = Field(
        default=300, ge=10, description="Seconds of rate history the fleet's chart shows."
    )
    tokens_per_segment: int = Field(
        default=20_000,
        ge=100,
        description="Tokens of one segment sent to the browser: past it, the start of the "
        "collapsed system prompt is left out first, then the segment's end (the page says how "
        "many).",
    )
    solved_at: float = Field(
        default=1.0,
        description="A reward at or above this counts as solved in the solved rate.",
    )
    export_dir: Path | None = Field(
        default=None,
        description="Where the export control writes Parquet files. Default: the current "
        "directory's rollstream-exports/.",
    )

    @field_validator("token", "control_token", "admin_token")
    @classmethod
    def _not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        """An empty token is no secret: refused rather than letting nobody (or anybody) in."""
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("an empty token; give one, or leave the variable unset")
        return value

    @model_validator(mode="after")
    def _control_is_not_read(self) -> ConsoleSettings:
        """The control token must differ from the read token, or every reader could act."""
        if (
            self.token is not None
            and self.control_token is not None
            and self.token.get_secret_value() == self.control_token.get_secret_value()
        ):
            raise ValueError("the control token is the read token: every reader could act")
        return self

    @field_validator("interceptors", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """A variable or option holds the URLs comma-separated."""
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value


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
        description="Tokens shown per segment: past it, the start of the collapsed system "
        "prompt is left out first, then the segment's end (the page says how many).",
    )
