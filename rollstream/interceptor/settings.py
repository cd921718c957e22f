"""Settings of the interceptor (``ROLLSTREAM_INTERCEPTOR_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.settings import BearerToken


class InterceptorSettings(BaseSettings):
    """Where the interceptor listens, what it forwards to, and what it captures."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_INTERCEPTOR_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    upstream: str = Field(
        default="http://127.0.0.1:8000", description="The inference server (vLLM, SGLang)."
    )
    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8100, ge=0, le=65535, description="Port to listen on.")
    admin_port: int = Field(
        default=8101, ge=0, le=65535, description="Admin port (health, metrics, pause); 0: any."
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=256,
        description="mitmproxy processes on this machine (one core each). Above 1: a supervisor"
        " runs that many interceptors on free ports and keeps each session on one of them; the"
        " admin port aggregates them (health, metrics, pause, sessions) and --port routes each"
        " connection by its session. The node sends each harness straight to its worker.",
    )
    state_name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="Name of this interceptor's spool and session registry under the state"
        " directory. Default: interceptor-<port>. A worker pool names its workers' itself.",
    )
    admin_token: BearerToken = Field(
        default=None,
        description="Bearer token the admin port requires on every route but /health (pause,"
        " policy version, sessions, metrics). Unset: the port takes any caller, with a warning"
        " at start; `rollstream up` sets a generated one.",
    )
    metrics_token: BearerToken = Field(
        default=None,
        description="Bearer token for GET /metrics alone, for a scraper that must not hold the"
        " admin token. Unset: /metrics takes the admin token.",
    )
    upstream_api_key: SecretStr | None = Field(
        default=None, description="Key sent upstream (the harness's key is its session id)."
    )
    upstream_model: str | None = Field(
        default=None, description="Model name sent upstream. Default: the harness's own."
    )
    backend: Literal["vllm", "sglang"] = Field(default="vllm", description="vllm or sglang.")
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        description="The served model's context length in tokens; an output limit above it is"
        " lowered to it (the record says so). Default: what the upstream's /v1/models says"
        " (vLLM and SGLang do).",
    )
    top_logprobs: int = Field(default=0, ge=0, le=20, description="Top logprobs to capture.")
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1024, description="Largest request body accepted."
    )
    policy_version: int = Field(
        default=0,
        ge=0,
        description="Stamped into every record until a trainer publishes a version on the "
        "control topic (or POST /admin/policy-version sets one).",
    )
    follow_policy: bool = Field(
        default=True, description="Follow the policy versions trainers publish (control topic)."
    )
    recent_contexts: int = Field(
        default=8, ge=1, description="Token sequences kept per session for delta encoding."
    )
    upstream_timeout_s: float = Field(
        default=600, ge=0.1, description="Seconds to wait for the upstream's response headers."
    )
    strict_sessions: bool = Field(
        default=False,
        description="Accept LLM calls only from sessions registered on the admin port (PUT"
        " /sessions/{id}; the rollout node registers each session before its harness starts"
        " and forgets it once ended). Others get a 401 in their API's format and are recorded"
        " as rejected under the session 'anonymous'. Registrations survive restarts"
        " (<state dir>/sessions/).",
    )
    session_hash_key: SecretStr | None = Field(
        default=None,
        description="Key of the HMAC naming the session of an API key nobody registered"
        " (outside strict mode): it is recorded as key-<24 hex digits>, never verbatim, since"
        " it may be a real credential. Sessions named by path or x-rollstream-session, and"
        " registered ones, keep their id. Default: made once under <state dir>/sessions/"
        "hash.key (mode 0600), so a key keeps its session across restarts and workers.",
    )
    drain_timeout_s: float = Field(
        default=10,
        ge=0,
        description="On stop (SIGTERM): how long calls in flight may finish. Later, they are"
        " cut and recorded as failed (interceptor_stopped); new calls wait and are cut unsent.",
    )
    stream_mode: Literal["passthrough", "synthesize"] = Field(
        default="passthrough",
        description="passthrough: stream upstream chunks as they come; synthesize: ask the"
        " upstream without streaming and replay its answer as a stream.",
    )
    context: Literal["ordinary", "exact"] = Field(
        default="ordinary",
        description="exact: when a call continues the session's previous conversation"
        " append-only, send its prompt to /v1/completions as token ids (the previous prompt,"
        " the tokens the model sampled, then the new messages rendered by the chat template),"
        " so the model conditions on its own tokens; other calls fall back to Chat Completions"
        " and their record says why. A session may choose per call with the header"
        " x-rollstream-context: exact|ordinary. Needs --family or --tokenizer and a vLLM"
        " upstream.",
    )
    tokenizer: Path | None = Field(
        default=None,
        description="The served model's tokenizer folder, for exact context: with --family,"
        " its vocabulary (default: the family's, from the cache); alone, a Hugging Face folder"
        " whose own chat template is used (the generic family). Checked at start: a family"
        " that cannot continue a turn token-wise refuses the mode (calls fall back, recorded).",
    )
    family: str | None = Field(
        default=None,
        description="The served model's family (qwen3, qwen3-coder, llama-3, gpt-oss, ...;"
        " `rollstream models families`), whose renderer continues turns in exact context and whose"
        " parsers read its tool calls and reasoning. Default: from --upstream-model when it names a"
        " known model (Qwen/Qwen3-8B: qwen3), else generic (--tokenizer's own template).",
    )
    mode: Literal["reverse", "forward"] = Field(
        default="reverse",
        description="reverse: harnesses use this proxy as their base URL; forward: an"
        " HTTPS_PROXY that intercepts TLS and sends LLM calls to any host to the upstream.",
    )
    confdir: Path | None = Field(
        default=None,
        description="mitmproxy's directory, holding the CA that forward mode signs with"
        " (created on first start). Default: <state dir>/mitmproxy.",
    )
    other_traffic: Literal["forward", "block"] = Field(
        default="forward",
        description="Forward mode: what to do with requests that are not LLM calls"
        " (telemetry, update checks): forward them unrecorded, or block them (403).",
    )
