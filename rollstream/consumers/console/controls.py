"""What the console's control token may do: pause and resume capture, replay, export.

Each acts through the mechanism the command line uses: the interceptors' admin routes (with
their admin token), ``consumers.reconstruct.replay`` and ``consumers.export``. A replay or an
export runs in the background; its outcome is kept for the console to show.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import SecretStr

from rollstream.consumers.export.run import ExportOptions, export
from rollstream.consumers.export.writers import format_for
from rollstream.consumers.reconstruct.replay import replay
from rollstream.consumers.reconstruct.strategies import get_strategy
from rollstream.errors import ConfigurationError
from rollstream.http_auth import auth_headers
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas.control import PAUSE_PATH, RESUME_PATH
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: How long a pause or resume may take on one interceptor.
PAUSE_WAIT_S = 120.0


@dataclass
class Job:
    """A replay or an export the console started, and how it ended."""

    kind: str
    target: str
    started_at: float = field(default_factory=time.time)
    done: bool = False
    error: str | None = None
    summary: str = ""

    def public(self) -> dict[str, Any]:
        """As the API sends it."""
        return vars(self).copy()


class Controls:
    """The console's actions, each logged."""

    def __init__(
        self,
        kafka: KafkaSettings,
        interceptors: Sequence[str],
        admin_token: SecretStr | None,
        export_dir: Path,
        tokenizer: ChatTokenizer | None = None,
    ) -> None:
        self.kafka = kafka
        self.tokenizer = tokenizer
        self.interceptors = list(interceptors)
        self.admin_token = admin_token
        self.export_dir = export_dir
        self.jobs: list[Job] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def _each_interceptor(self, path: str) -> list[dict[str, Any]]:
        if not self.interceptors:
            raise ConfigurationError(
                "the console knows no interceptor: give ROLLSTREAM_CONSOLE_INTERCEPTORS"
            )
        results: list[dict[str, Any]] = []
        # Longer than a pause may wait for the calls in flight to drain (the admin's bound).
        timeout = aiohttp.ClientTimeout(total=PAUSE_WAIT_S)
        async with aiohttp.ClientSession(
            timeout=timeout, headers=auth_headers(self.admin_token)
        ) as http:
            for url in self.interceptors:
                try:
                    async with http.post(url.rstrip("/") + path, json={}) as reply:
                        body = await reply.json(content_type=None)
                        results.append({"url": url, "status": reply.status, "body": body})
                except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                    results.append({"url": url, "status": None, "body": {"error": str(exc)}})
        return results

    async def pause(self) -> list[dict[str, Any]]:
        """Pause capture on every interceptor (new calls wait; in-flight ones drain)."""
        log.info("console: pausing capture on %d interceptors", len(self.interceptors))
        return await self._each_interceptor(PAUSE_PATH)

    async def resume(self) -> list[dict[str, Any]]:
        """Resume capture on every interceptor."""
        log.info("console: resuming capture on %d interceptors", len(self.interceptors))
        return await self._each_interceptor(RESUME_PATH)

    def _background(self, job: Job, work: Any) -> Job:
        async def run() -> None:
            try:
                job.summary = await work
            except Exception as exc:  # any failure is the job's outcome, shown to the user
                log.warning("console: %s %s failed: %s", job.kind, job.target, exc)
                job.error = str(exc)
            finally:
                job.done = True

        self.jobs.append(job)
        task = asyncio.create_task(run(), name=f"console-{job.kind}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def replay(self, strategy: str, sessions: set[str] | None) -> Job:
        """Rebuild the retained sessions with ``strategy`` into ``trajectories.<strategy>``."""
        get_strategy(strategy)  # an unknown one is refused here, not in the background
        if not _NAME.fullmatch(strategy):
            raise ConfigurationError(
                f"a replay from the console takes a built-in strategy: {strategy!r}"
            )
        log.info("console: replaying with %s", strategy)

        async def work() -> str:
            report = await replay(
                self.kafka,
                strategy,
                strategy,
                sessions=sessions,
                tokenizer=self.tokenizer,
                progress=log.info,
            )
            return f"{report.trajectories} trajectories into {report.topic}"

        return self._background(Job("replay", f"trajectories.{strategy}"), work())

    def export(self, topic: str, sessions: frozenset[str] | None, name: str) -> Job:
        """Write ``topic``'s trajectories of ``sessions`` to ``export_dir/name.parquet``."""
        if not _NAME.fullmatch(name):
            raise ConfigurationError(f"an export's name is letters, digits, - and _: {name!r}")
        out = self.export_dir / f"{name}.parquet"
        self.export_dir.mkdir(parents=True, exist_ok=True)
        options = ExportOptions(out=out, fmt=format_for(out, None), topic=topic, sessions=sessions)
        log.info("console: exporting %s to %s", topic, out)

        async def work() -> str:
            report = await export(self.kafka, options, progress=log.info)
            return report.summary()

        return self._background(Job("export", str(out)), work())

    async def stop(self) -> None:
        """Cancel the jobs still running."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
