"""Settings of the local stack (``ROLLSTREAM_STACK_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class StackSettings(BaseSettings):
    """What ``rollstream up`` starts and where."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_STACK_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    host: str = Field(default="127.0.0.1", description="Address every service listens on.")
    upstream: str | None = Field(
        default=None,
        description="A running vLLM or SGLang (http://host:port). Default: start the reference "
        "backend (or vLLM with --vllm).",
    )
    vllm: str | None = Field(
        default=None, description="Launch `vllm serve MODEL` as the upstream (needs vllm; GPU)."
    )
    engine: Literal["reference", "vllm"] = Field(
        default="reference",
        description="The upstream the stack starts: the reference backend, or a real vLLM "
        "(`rollstream engine serve`) serving --family's tiny model playing the scenarios; "
        "installed into the cache the first time (about 3 GB).",
    )
    tool_parser: str = Field(
        default="hermes", description="vLLM's --tool-call-parser for the served model."
    )
    policy: Literal["scripted", "tiny"] = Field(
        default="scripted",
        description="The reference backend's policy: scripted (harnesses complete tasks) or "
        "tiny (a numpy LM the example trainer updates).",
    )
    scripted_logprobs: Literal["scripted", "tiny"] = Field(
        default="tiny",
        description="The scripted policy's logprobs: its own, or the tiny model's (which the "
        "example trainer updates).",
    )
    family: str | None = Field(
        default=None,
        description="The served model family (qwen3, qwen3-coder, llama-3, gpt-oss, ...; generic:"
        " the tokenizer folder's own template): the reference backend serves it on its real "
        "vocabulary, the interceptor renders and parses with it. Default: "
        "ROLLSTREAM_BACKEND_FAMILY, else generic.",
    )
    model: str = Field(
        default="rollstream-tiny",
        description="The served model name (vLLM's --served-model-name; what harnesses ask for).",
    )
    max_model_len: int = Field(
        default=262144, ge=1024, description="The reference backend's context length."
    )
    backend_port: int = Field(default=8000, ge=0, le=65535, description="0: any free port.")
    interceptor_port: int = Field(default=8100, ge=0, le=65535, description="0: any free port.")
    admin_port: int = Field(default=8101, ge=0, le=65535, description="0: any free port.")
    node_port: int = Field(default=8200, ge=0, le=65535, description="0: any free port.")
    strategy: str = Field(default="prefix_merge", description="The reconstructor's strategy.")
    context: Literal["ordinary", "exact"] = Field(
        default="ordinary",
        description="The interceptor's context mode (docs/exact-context.md). exact needs the "
        "served model's tokenizer: the reference backend's, or the --vllm model's folder.",
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Interceptor processes (one core each; the interceptor's --workers): the "
        "node sends each session's harness straight to its worker.",
    )
    node: bool = Field(default=True, description="Start a rollout node.")
    strict_sessions: bool = Field(
        default=True,
        description="The interceptor serves only the sessions the node registered (a harness "
        "started by hand gets a 401); --no-strict-sessions serves any key, recorded under its "
        "keyed hash (docs/sessions.md).",
    )
    start_timeout_s: float = Field(
        default=180.0, gt=0, description="How long each service may take to become healthy."
    )
    stop_timeout_s: float = Field(
        default=30.0, gt=0, description="How long each service may take to stop on SIGTERM."
    )
