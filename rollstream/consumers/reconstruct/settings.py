"""Settings of the reconstructor service (``ROLLSTREAM_RECONSTRUCT_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ReconstructSettings(BaseSettings):
    """Which strategy, which consumer group, and how long to wait for a session's calls."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_RECONSTRUCT_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    strategy: str = Field(
        default="prefix_merge",
        description="Strategy name (per_call, prefix_merge, prompt_prefix_merge, tree, "
        "retokenize) or an import path module:function.",
    )
    group: str | None = Field(
        default=None, description="Consumer group. Default: rollstream-reconstruct-<strategy>."
    )
    instance: str | None = Field(
        default=None,
        description="Ignored, kept so that command lines and environments written for earlier "
        "versions still start: transactional ids now belong to input partitions, the same on "
        "every instance.",
    )
    output: str = Field(
        default="trajectories",
        description="Output topic (logical name or full name).",
    )
    wait_for_calls_s: float = Field(
        default=10.0,
        ge=0,
        description="After SessionEnded, how long to wait for calls still on their way "
        "(counted from when it is read, or from its timestamp if that is later).",
    )
    idle_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        description="A session with no SessionEnded and no record for this long is abandoned "
        "(counted in the records' timestamps, so a restart does not restart the count).",
    )
    tokenizer: Path | None = Field(
        default=None,
        description="Tokenizer folder for the retokenize strategy (with --family: its vocabulary;"
        " alone: a Hugging Face folder whose own chat template renders).",
    )
    family: str | None = Field(
        default=None,
        description="The served model's family for the retokenize strategy (qwen3, llama-3, ...;"
        " `rollstream models families`); its vocabulary comes from the cache unless --tokenizer.",
    )
    max_batch_records: int = Field(
        default=2000, ge=1, description="Records read per poll (bounds one transaction)."
    )

    @property
    def group_id(self) -> str:
        """The consumer group (and the prefix of the transactional id)."""
        return self.group or f"rollstream-reconstruct-{self.strategy.replace(':', '.')}"
