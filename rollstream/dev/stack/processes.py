"""Detached service processes: start with a log, record, check, stop (TERM, then KILL)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp

from rollstream.dev.broker.secure import SecureFiles, secure_client
from rollstream.dev.stack.components import Component
from rollstream.errors import ConfigurationError
from rollstream.settings import KafkaSettings


@dataclass
class Running:
    """A started component: its pid, log and how to check it."""

    name: str
    pid: int
    argv: list[str]
    log: str
    health: str | None = None
    marker: str | None = None
    endpoint: str | None = None
    url: str | None = None
    #: Where this run's output starts in its log (earlier runs of the stack wrote before it).
    log_start: int = 0

    def alive(self) -> bool:
        """Whether the process still runs and is still ours (pids are reused)."""
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z" and [c.decode(errors="replace") for c in cmdline if c] == self.argv


def state_path(state_dir: Path) -> Path:
    """Where ``up`` records the stack it started under ``state_dir``."""
    return state_dir / "stack" / "stack.json"


@dataclass
class StackState:
    """What ``up`` started, saved as JSON under the state directory."""

    bootstrap_servers: str
    topic_prefix: str
    started_broker: bool
    components: list[Running] = field(default_factory=list)
    #: A secure broker's folder of CA and passwords (``kafka start --secure``); None: PLAINTEXT.
    kafka_secure: str | None = None

    def kafka(self, principal: str = "admin") -> KafkaSettings:
        """Client settings for the stack's broker, as ``principal`` when it is secure."""
        if self.kafka_secure is None:
            return KafkaSettings(
                bootstrap_servers=self.bootstrap_servers, topic_prefix=self.topic_prefix
            )
        files = SecureFiles(Path(self.kafka_secure))
        client = secure_client(files, principal, self.bootstrap_servers)
        return client.model_copy(update={"topic_prefix": self.topic_prefix})

    def url(self, name: str) -> str | None:
        """The base URL of component ``name`` (``interceptor``, ``node``, ...), if it runs."""
        return next((c.url for c in self.components if c.name == name), None)

    def admin_url(self) -> str | None:
        """The interceptor's admin URL."""
        for c in self.components:
            if c.name == "interceptor" and c.health is not None:
                return c.health.removesuffix("/health")
        return None

    @classmethod
    def load(cls, path: Path) -> StackState | None:
        """The saved state, or None when no stack was brought up there."""
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ConfigurationError(f"{path} is not a stack state file: {exc}") from exc
        raw["components"] = [Running(**c) for c in raw.get("components", [])]
        return cls(**raw)

    def save(self, path: Path) -> None:
        """Write atomically (a crash leaves the old file or the new one)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(path)


#: The services this process started: kept so that they are not reaped as garbage while they
#: run (they outlive ``up --detach``, which is the point).
_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn(component: Component, logs: Path, env: dict[str, str]) -> Running:
    """Start ``component`` detached (own session: a Ctrl+C of ``up`` is not delivered to it)."""
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{component.name}.log"
    with log_path.open("ab") as log:
        log_start = log.tell()
        proc = subprocess.Popen(
            component.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=os.environ | env | component.env,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    running = Running(
        component.name,
        proc.pid,
        component.argv,
        str(log_path),
        component.health,
        component.marker,
        component.endpoint,
        component.url,
        log_start,
    )
    # Until it has exec'd, /proc shows our own command line and alive() would say no.
    deadline = time.monotonic() + 5
    while not running.alive() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return running


async def healthy(running: Running, http: aiohttp.ClientSession) -> bool:
    """Ready now: its health URL answers 200, or this run's output shows its marker."""
    if not running.alive():
        return False
    if running.health is not None:
        try:
            async with http.get(running.health) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False
    if running.marker is not None:
        return running.marker in output(running)
    return True


def output(running: Running) -> str:
    """What this run of the service wrote to its log so far."""
    try:
        with open(running.log, "rb") as log:
            log.seek(running.log_start)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def log_tail(running: Running, lines: int = 15) -> str:
    """The last lines of its log, to say why it did not come up."""
    try:
        return "\n".join(Path(running.log).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def terminate(running: Running, timeout: float) -> str:
    """SIGTERM (the services stop cleanly), SIGKILL after ``timeout``; what happened."""
    try:
        return _terminate(running, timeout)
    finally:
        child = _children.pop(running.pid, None)
        if child is not None:  # ours: reap it, so no zombie (or warning) is left behind
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)


def _terminate(running: Running, timeout: float) -> str:
    if not running.alive():
        return "not running"
    os.kill(running.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running.alive():
            return "stopped"
        time.sleep(0.1)
    try:
        os.killpg(running.pid, signal.SIGKILL)  # its session: harnesses and tools too
    except ProcessLookupError:
        return "stopped"
    deadline = time.monotonic() + 10
    while running.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return f"killed after {timeout:g}s"
