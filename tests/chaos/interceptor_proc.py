"""``rollstream interceptor`` as a child process: started, signalled, restarted, measured."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from rollstream.host import free_port
from rollstream.lifecycle import die_with_parent
from rollstream.settings import KafkaSettings


@dataclass
class InterceptorProcess:
    """One interceptor at fixed ports and a fixed state dir, so a restart is the same proxy.

    ``bootstrap`` may differ between starts (a broker address where nothing listens makes
    every record go to the spool). Output goes to ``log`` (appended across restarts).
    """

    upstream: str
    kafka: KafkaSettings
    state_dir: Path
    log: Path
    options: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The base URL harnesses point at."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        """The admin port's base URL."""
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def spool_dir(self) -> Path:
        """Where the capture publisher spools (see rollstream.interceptor.proxy)."""
        return self.state_dir / "spool" / f"interceptor-{self.port}"

    @property
    def pid(self) -> int:
        """The running process's id."""
        assert self.process is not None
        return self.process.pid

    async def start(self, bootstrap: str | None = None, log_level: str = "INFO") -> None:
        """Start the process and wait until its admin port answers."""
        assert self.process is None or self.process.poll() is not None, "already running"
        env = os.environ | {
            "ROLLSTREAM_STATE_DIR": str(self.state_dir),
            "ROLLSTREAM_BOOTSTRAP_SERVERS": bootstrap or self.kafka.bootstrap_servers,
            "ROLLSTREAM_TOPIC_PREFIX": self.kafka.topic_prefix,
            # A broker that is away is noticed within a second, not after 10 s.
            "ROLLSTREAM_PUBLISHER_SEND_TIMEOUT_S": "2",
            "ROLLSTREAM_PUBLISHER_RETRY_INTERVAL_S": "0.5",
            **self.env,
        }
        argv = [sys.executable, "-m", "rollstream", "--log-level", log_level, "interceptor"]
        argv += ["--upstream", self.upstream, "--port", str(self.port)]
        argv += ["--admin-port", str(self.admin_port), "--no-follow-policy", *self.options]
        self.process = self._spawn(argv, env)
        await self.wait_healthy(timeout=60)

    def _spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        # die_with_parent: a test run killed by a timeout leaves no interceptor behind.
        with self.log.open("ab") as out:
            return subprocess.Popen(
                argv, env=env, stdout=out, stderr=out, preexec_fn=die_with_parent
            )

    async def health(self) -> dict[str, Any]:
        """The admin port's /health answer."""
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{self.admin_url}/health") as response,
        ):
            response.raise_for_status()
            body: dict[str, Any] = await response.json()
            return body

    async def register(self, *sessions: str) -> None:
        """Register ``sessions`` on the admin port, as the node does: each key is then its id.

        Outside strict mode an unregistered key is recorded only as its keyed hash.
        """
        async with aiohttp.ClientSession() as http:
            for session in sessions:
                async with http.put(f"{self.admin_url}/sessions/{session}") as response:
                    response.raise_for_status()

    async def metrics(self) -> dict[str, float]:
        """The admin port's Prometheus counters by name."""
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{self.admin_url}/metrics") as response,
        ):
            text = await response.text()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.split()
                values[name] = float(value)
        return values

    async def wait_healthy(self, timeout: float) -> None:
        """Wait until /health answers; fail at once if the process died."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"the interceptor exited: {self.log.read_text()[-3000:]}")
            try:
                if (await self.health())["status"] == "ok":
                    return
            except (aiohttp.ClientError, OSError):
                pass
            assert time.monotonic() < deadline, "the interceptor did not come up"
            await asyncio.sleep(0.1)

    async def wait_metric(self, name: str, at_least: float, timeout: float = 30) -> float:
        """Wait until counter ``name`` reaches ``at_least``; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = (await self.metrics()).get(name, 0.0)
            if value >= at_least:
                return value
            assert time.monotonic() < deadline, f"{name} stayed at {value} < {at_least}"
            await asyncio.sleep(0.1)

    def send(self, signum: signal.Signals) -> None:
        """Signal the process."""
        assert self.process is not None
        self.process.send_signal(signum)

    async def wait_exit(self, timeout: float) -> int:
        """The exit code, once the process has ended (fails after ``timeout``)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, "the interceptor did not exit"
            await asyncio.sleep(0.05)
        return self.process.returncode

    async def stop(self) -> None:
        """SIGTERM and wait; SIGKILL if it does not end (a test's cleanup)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            await self.wait_exit(20)
        except AssertionError:
            self.process.kill()
            await self.wait_exit(5)

    def rss_kib(self) -> int:
        """Resident memory of the process (VmRSS, KiB)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")
