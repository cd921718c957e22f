"""One worker of an interceptor pool: a ``rollstream interceptor`` process at fixed ports.

A worker is configured entirely through its environment (the pool's own settings, with its
ports, its state name and ``workers=1``), so it is exactly the interceptor one would run by
hand, and a restart on the same ports and state name is the same interceptor again: its
session registry, its spool (which it drains) and its address, which harnesses hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from rollstream.errors import ConfigurationError
from rollstream.interceptor.admin import server_url
from rollstream.lifecycle import die_with_parent
from rollstream.schemas.control import HEALTH_PATH
from rollstream.subprocesses import spawn

log = logging.getLogger(__name__)

_HEALTH_TIMEOUT = aiohttp.ClientTimeout(total=2)


def settings_env(settings: BaseSettings) -> dict[str, str | None]:
    """Every field of ``settings`` as the environment variable that sets it (None: unset).

    Passing the resolved values, not the command line, gives a child process the same
    settings whichever source (flag, environment, default) each came from. A field read from a
    file (``json_schema_extra={"read_from": <the file's field>}``) is passed as the file when
    one was given: the child reads it as its parent did, the secret stays out of environments,
    and the settings' "not both" check holds.
    """
    prefix = str(settings.model_config.get("env_prefix", ""))
    env: dict[str, str | None] = {}
    for name, info in type(settings).model_fields.items():
        value = getattr(settings, name)
        key = f"{prefix}{name}".upper()
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        source = extra.get("read_from")
        if value is None or (isinstance(source, str) and getattr(settings, source) is not None):
            env[key] = None
        elif isinstance(value, SecretStr):
            env[key] = value.get_secret_value()
        elif isinstance(value, bool):
            env[key] = "true" if value else "false"
        else:
            env[key] = str(value)
    return env


def merged_env(base: Mapping[str, str], *layers: Mapping[str, str | None]) -> dict[str, str]:
    """``base`` with each layer applied in turn; a None value removes the variable."""
    env = dict(base)
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
    return env


@dataclass
class WorkerProcess:
    """A worker's fixed identity (index, ports, state name) and its current process."""

    index: int
    host: str  # where the pool reaches it (loopback for a wildcard listen address)
    port: int
    admin_port: int
    state_name: str
    process: asyncio.subprocess.Process | None = None
    #: Times it was started again after it died.
    restarts: int = 0
    #: Its admin port answered since it was last started.
    up: bool = False
    started_at: float = field(default=0.0)

    @property
    def url(self) -> str:
        """The worker's proxy address (what a harness of one of its sessions calls)."""
        return server_url(self.host, self.port)

    @property
    def admin_url(self) -> str:
        """The worker's own admin port."""
        return server_url(self.host, self.admin_port)

    @property
    def pid(self) -> int | None:
        """The running process's id."""
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.process is not None and self.process.returncode is None

    async def spawn(self, env: dict[str, str]) -> None:
        """Start ``python -m rollstream interceptor`` configured by ``env``."""
        self.up = False
        self.started_at = time.monotonic()
        self.process = await spawn(
            sys.executable,
            "-m",
            "rollstream",
            "interceptor",
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            # Its own session: a Ctrl+C in the terminal reaches the pool alone, which then
            # stops each worker once (a second signal would make a worker exit unflushed).
            start_new_session=True,
            # A pool that dies, however it dies, leaves no worker behind.
            preexec_fn=die_with_parent,
        )
        log.info(
            "worker %d: pid %d, proxy %s, admin %s", self.index, self.pid, self.url, self.admin_url
        )

    async def wait_healthy(self, http: aiohttp.ClientSession, timeout: float) -> None:
        """Wait until its admin port answers /health; ConfigurationError if it dies or is slow."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                code = self.process.returncode if self.process is not None else None
                raise ConfigurationError(
                    f"interceptor worker {self.index} exited during start-up (code {code})",
                    retriable=True,
                )
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                async with http.get(
                    f"{self.admin_url}{HEALTH_PATH}", timeout=_HEALTH_TIMEOUT
                ) as response:
                    if response.status == 200:
                        self.up = True
                        return
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"interceptor worker {self.index} did not answer {self.admin_url}{HEALTH_PATH} "
                    f"within {timeout:g} s",
                    retriable=True,
                )
            await asyncio.sleep(0.1)

    async def stop(self, timeout: float) -> int | None:
        """SIGTERM (it drains and flushes its publisher), SIGKILL after ``timeout``; exit code."""
        process = self.process
        if process is None:
            return None
        self.up = False
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                log.warning("worker %d did not stop within %g s: killed", self.index, timeout)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        return process.returncode


def worker_base_env() -> dict[str, str]:
    """The pool's own environment, with its log level made explicit for the workers."""
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    return os.environ | {"ROLLSTREAM_LOG_LEVEL": str(level)}
