"""Settings of the example trainer (``ROLLSTREAM_EXAMPLE_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.settings import BearerToken


class ExampleTrainerSettings(BaseSettings):
    """Where the backend and the interceptor are, and the optimisation's few knobs."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_EXAMPLE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    backend_url: str = Field(
        default="http://127.0.0.1:8000",
        description="The reference backend serving the tiny policy (weights in and out).",
    )
    interceptor_admin: str | None = Field(
        default=None,
        description="The interceptor's admin URL: paused (drained) during each weight sync. "
        "None: no pause.",
    )
    interceptor_token: BearerToken = Field(
        default=None,
        description="The interceptor's admin token (its ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN).",
    )
    backend_token: BearerToken = Field(
        default=None,
        description="The backend's admin token for its weights (ROLLSTREAM_BACKEND_ADMIN_TOKEN).",
    )
    consumer_group: str = Field(default="example-trainer", description="The trainer's group.")
    learning_rate: float = Field(default=0.05, gt=0, description="Step size of gradient ascent.")
    clip: float = Field(default=0.2, gt=0, lt=1, description="PPO/GRPO ratio clip epsilon.")
    temperature: float = Field(
        default=1.0, gt=0, description="The temperature the harnesses sampled at."
    )
    groups_per_step: int = Field(default=1, ge=1, description="GRPO groups per update.")
    steps: int | None = Field(default=None, ge=1, description="Stop after this many updates.")
    drain_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="How long a pause waits for in-flight calls. Calls still in flight then: "
        "the sync is skipped (logged, counted) and the interceptor resumed; the next step's "
        "sync deploys the update.",
    )
