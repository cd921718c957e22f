"""Settings of the rollout node (``ROLLSTREAM_NODE_*``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollstream.settings import BearerToken


class NodeSettings(BaseSettings):
    """How many sessions run in each stage, how far init runs ahead, what is kept."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_NODE_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    max_init: int = Field(
        default=4, ge=1, description="Sessions initializing at once (runtime, workspace, setup)."
    )
    max_run: int = Field(default=8, ge=1, description="Harnesses running at once.")
    max_post: int = Field(
        default=4, ge=1, description="Sessions in post-run at once (diff, call count, records)."
    )
    prewarm: int = Field(
        default=4,
        ge=0,
        description="Initialized sessions that may wait ready for a run slot; 0: init starts "
        "only when a run slot is free.",
    )
    keep_workdirs: bool = Field(
        default=False, description="Keep each session's directory after teardown (debugging)."
    )
    work_root: Path | None = Field(
        default=None, description="Where session directories are made; default: the temp dir."
    )
    diff_max_bytes: int = Field(
        default=256 * 1024, ge=0, description="Largest workspace diff artifact; longer: truncated."
    )
    log_tail_bytes: int = Field(
        default=8 * 1024, ge=0, description="Bytes of the harness's stdout and stderr kept."
    )
    base_url: str = Field(
        default="http://127.0.0.1:8100",
        description="The interceptor's root URL (without /v1) the harnesses are pointed at.",
    )
    model: str = Field(
        default="rollstream-tiny", description="Model name the harnesses ask for by default."
    )
    runtime: Literal["local", "docker"] = Field(
        default="local", description="Where sessions run: local directories or docker."
    )
    isolation: Literal["namespace", "none"] = Field(
        default="namespace",
        description="Network of each session's harness (policy code): namespace gives it "
        "network namespaces of its own whose only way out is the interceptor at base_url, "
        "relayed to 127.0.0.1 at its port (no broker, no admin port, no node API); setup "
        "commands keep the host's network (docker runtime: none, the container is walled). "
        "Refused at start where namespaces are not allowed (a container needs CAP_SYS_ADMIN; "
        "the docker runtime needs a root node). none: the host's network.",
    )
    docker_image: str = Field(
        default="rollstream-base:trixie",
        description="Image of the docker runtime's containers (`rollstream docker images` builds "
        "this one: Debian with Python, git and Node.js); it must be in the engine already.",
    )
    docker_network: str = Field(
        default="host",
        description="Network mode of the docker runtime's containers when isolation is none; "
        "'host' lets the harness reach the interceptor at base_url on this machine.",
    )
    docker_mounts: tuple[Path, ...] = Field(
        default=(),
        description="Host directories bind-mounted read-only at the same paths in each session's "
        'container, as a JSON list: e.g. ["~/.cache/rollstream/harnesses"] runs the harnesses '
        "installed on the host with the image's Node.js.",
    )
    node_id: str = Field(
        default_factory=socket.gethostname, description="This node's name in SessionStarted."
    )
    host: str = Field(default="127.0.0.1", description="Address of the node's HTTP API.")
    port: int = Field(default=8200, ge=0, le=65535, description="Port of the HTTP API; 0: any.")
    api_token: BearerToken = Field(
        default=None,
        description="Bearer token the node's API requires on every route but /health (tasks run "
        "commands); `rollstream run` sends it. Unset: the API takes any caller, with a warning "
        "at start; `rollstream up` sets a generated one.",
    )
    metrics_token: BearerToken = Field(
        default=None,
        description="Bearer token for GET /metrics alone (a scraper). Unset: the API token.",
    )
    interceptor_token: BearerToken = Field(
        default=None,
        description="The interceptor's admin token (its ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN), "
        "sent when registering sessions there. Never given to a harness.",
    )
    interceptor_admin: str = Field(
        default="http://127.0.0.1:8101",
        description="The interceptor's admin URL, asked how many calls each session made.",
    )
    worker_urls: Literal["direct", "pool"] = Field(
        default="direct",
        description="With an interceptor pool (--workers): direct points each harness at the "
        "worker holding its session, at the address the pool's registration reply names, once "
        "a TCP connect there succeeds (else, with a warning, at base_url); pool points every "
        "harness at base_url, the pool's router, which relays each connection to its "
        "session's worker (one hop more; for ports remapped between node and pool).",
    )
    # A literal, not pool_admin.WORKER_TIMEOUT_S (5 s) times two: importing the pool here would
    # make the settings need aiohttp, which a base install lacks (`rollstream node --help`).
    registration_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="How long registering a session on the interceptor's admin port may take "
        "before its harness starts without it. Keep it above an interceptor pool's wait for "
        "its worker (5 s), so that the pool's answer decides, not the node's impatience.",
    )
    group: str = Field(default="rollstream-node", description="Consumer group over the tasks.")
    handoff_timeout_s: float = Field(
        default=25.0,
        gt=0,
        le=240,
        description="When the node leaves or a rebalance takes task partitions from it: how "
        "long the running sessions of their tasks may take to finish before they are cancelled "
        "and run again by the partitions' next owner. Meanwhile the group's rebalance waits; "
        "keep a supervisor's stop grace period above it.",
    )
    max_queued: int | None = Field(
        default=None,
        ge=1,
        description="Samples waiting for an init slot above which the node stops taking tasks "
        "off the topic (a backlog stays there for other nodes); default: max_run + prewarm.",
    )
    finished_sessions_kept: int = Field(
        default=10_000,
        ge=1,
        description="Ended sessions whose summary GET /tasks/{id} still shows; past it the "
        "oldest tasks are forgotten.",
    )

    @property
    def queue_bound(self) -> int:
        """``max_queued``, or its default from the run slots."""
        return self.max_queued if self.max_queued is not None else self.max_run + self.prewarm
