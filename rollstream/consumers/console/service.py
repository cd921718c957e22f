"""The console service: the feed, the services' own figures, the web server, in one process.

Beside the feed (:mod:`.feed`), two pollers keep the figures Kafka does not hold: every consumer
group's lag (from the broker, every few seconds) and each interceptor's health (paused, spool
alarm; from its open ``/health``). A snapshot joins them with the fleet's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import SecretStr

from rollstream.consumers.console.assets import Assets
from rollstream.consumers.console.controls import Controls
from rollstream.consumers.console.feed import Feed, RecordFetcher, TrajectoryIndex, followed
from rollstream.consumers.console.fleet import Fleet
from rollstream.consumers.console.rewards import Rewards
from rollstream.consumers.console.server import ConsoleApp
from rollstream.consumers.console.settings import ConsoleSettings
from rollstream.consumers.console.trajectory_view import TokenTexts, trajectory_view
from rollstream.kafka.lag import group_lags
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import Scored, TopicNames, Trajectory
from rollstream.schemas.control import HEALTH_PATH
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)

LAG_EVERY_S = 5.0
HEALTH_EVERY_S = 1.0
STOP_WAIT_S = 15.0
SNAPSHOT_EVERY_S = 0.5


class Console:
    """``rollstream console``: start it, read ``url``, stop it (or ``async with``)."""

    def __init__(
        self,
        settings: ConsoleSettings,
        kafka: KafkaSettings,
        tokenizer: ChatTokenizer,
        *,
        since: datetime | None = None,
        assets: Assets | None = None,
    ) -> None:
        if settings.token is None:  # a generated one, printed in the console's URL
            settings = settings.model_copy(update={"token": SecretStr(secrets.token_urlsafe(24))})
        self.settings = settings
        self.kafka = kafka
        self.assets = assets or Assets()
        self.assets.require()
        self.fleet = Fleet(
            max_sessions=settings.max_sessions,
            max_calls=settings.max_calls,
            rate_window_s=settings.rate_window_s,
            history_s=settings.history_s,
        )
        self.rewards = Rewards(max_groups=settings.max_groups, solved_at=settings.solved_at)
        self.index = TrajectoryIndex(settings.max_indexed)
        self.feed = Feed(kafka, self.fleet, self.rewards, self.index, since)
        self.fetcher = RecordFetcher(kafka)
        self.texts = TokenTexts(tokenizer)
        self.controls = Controls(
            kafka,
            settings.interceptors,
            settings.admin_token,
            settings.export_dir or Path.cwd() / "rollstream-exports",
            tokenizer,
        )
        self.lags: list[dict[str, Any]] = []
        self.interceptors: list[dict[str, Any]] = [
            {"url": u, "up": False, "paused": False, "spool_alarm": False, "spool_bytes": 0}
            for u in settings.interceptors
        ]
        self.streams = 0
        self.stopping = False
        self._view_lock = asyncio.Lock()
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._snapshot: tuple[float, dict[str, Any]] | None = None
        self.port = 0

    @property
    def token(self) -> SecretStr:
        """The read token (given or generated)."""
        assert self.settings.token is not None
        return self.settings.token

    @property
    def base_url(self) -> str:
        """Where the console listens."""
        return f"http://{self.settings.host}:{self.port}/"

    @property
    def url(self) -> str:
        """The URL to open: the token rides in the fragment, which the browser never sends."""
        return f"{self.base_url}#token={self.token.get_secret_value()}"

    async def start(self) -> None:
        """Read the topics, poll the services, serve; on a failure, stop what had started."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        await self.feed.start()
        await self.fetcher.start()
        self._runner = web.AppRunner(ConsoleApp(self, self.assets).app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._tasks = [
            asyncio.create_task(self._poll_lags(), name="console-lags"),
            asyncio.create_task(self._poll_interceptors(), name="console-health"),
        ]
        log.info("console: serving on %s", self.base_url)

    async def stop(self) -> None:
        """Stop serving, polling and reading."""
        self.stopping = True
        self._stop.set()
        # The pollers end between two rounds: cancelled inside one, a client half started
        # would be left unclosed. A round is bounded; past the bound they are cancelled.
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=STOP_WAIT_S)
            for task in late:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._runner is not None:
            await self._runner.cleanup()
        await self.controls.stop()
        await self.fetcher.stop()
        await self.feed.stop()

    async def __aenter__(self) -> Console:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def snapshot(self) -> dict[str, Any]:
        """The fleet's figures with the services' own.

        Made at most once per ``SNAPSHOT_EVERY_S`` and shared: every open browser streams it
        each second, and making one walks every session the console holds.
        """
        now = time.monotonic()
        if self._snapshot is not None and now - self._snapshot[0] < SNAPSHOT_EVERY_S:
            return self._snapshot[1]
        snap = self.fleet.snapshot(time.time())
        snap["lag"] = self.lags
        snap["interceptors"] = self.interceptors
        snap["feed"] = {
            "caught_up": self.feed.caught_up,
            "undecodable": self.feed.undecodable,
            "failed": self.feed.failed,
        }
        self._snapshot = (now, snap)
        return snap

    def metrics_text(self) -> str:
        """The console's own counters, as Prometheus text."""
        values: list[tuple[str, str, float]] = [
            ("rollstream_console_records_total", "counter", self.feed.read),
            ("rollstream_console_records_undecodable_total", "counter", self.feed.undecodable),
            ("rollstream_console_records_failed_total", "counter", self.feed.failed),
            ("rollstream_console_sessions_held", "gauge", len(self.fleet.sessions)),
            ("rollstream_console_sessions_forgotten_total", "counter", self.fleet.forgotten),
            ("rollstream_console_calls_held", "gauge", self.fleet.held_calls),
            ("rollstream_console_calls_forgotten_total", "counter", self.fleet.calls_forgotten),
            ("rollstream_console_trajectories_indexed", "gauge", len(self.index.places)),
            ("rollstream_console_trajectories_forgotten_total", "counter", self.index.forgotten),
            ("rollstream_console_streams_open", "gauge", self.streams),
            ("rollstream_console_caught_up", "gauge", int(self.feed.caught_up)),
        ]
        lines = []
        for name, kind, value in values:
            lines += [f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"

    async def trajectory(self, trajectory_id: str, topic: str | None) -> dict[str, Any] | None:
        """The viewer's data of one trajectory, read back from Kafka; None if not found."""
        full = TopicNames(self.kafka.topic_prefix).resolve(topic) if topic else None
        place = self.index.find(trajectory_id, full)
        if place is None:
            return None
        record = await self.fetcher.fetch(place)
        if not isinstance(record, Scored | Trajectory):
            return None
        trajectory = record.trajectory if isinstance(record, Scored) else record
        row = self.fleet.sessions.get(trajectory.session_id)
        calls = list(row.calls) if row is not None else []
        others = list(self.index.topics_of(trajectory.session_id))
        async with self._view_lock:  # decoding tokens takes the CPU: off the event loop
            return await asyncio.to_thread(
                trajectory_view,
                record,
                self.texts,
                calls,
                topic=place.topic,
                other_topics=others,
                cap=self.settings.tokens_per_segment,
            )

    async def _poll_lags(self) -> None:
        names = TopicNames(self.kafka.topic_prefix)
        while not self._stop.is_set():
            try:
                topics = followed(names, {tp.topic for tp in self.feed.assigned()})
                found = await group_lags(self.kafka, topics)
                self.lags = [{"group": g.group, "topic": g.topic, "lag": g.lag} for g in found]
            except Exception as exc:  # the broker may be away a while; the figure waits
                log.debug("console: lags not read: %s", exc)
            await self._pause(LAG_EVERY_S)

    async def _poll_interceptors(self) -> None:
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not self._stop.is_set():
                for state in self.interceptors:
                    await self._ask_health(http, state)
                await self._pause(HEALTH_EVERY_S)

    async def _ask_health(self, http: aiohttp.ClientSession, state: dict[str, Any]) -> None:
        """One interceptor's health into ``state``; any failure shows it down (and is logged)."""
        url = state["url"].rstrip("/") + HEALTH_PATH
        try:
            async with http.get(url) as reply:
                body = await reply.json(content_type=None)
            if not isinstance(body, dict):
                raise ValueError(f"not a JSON object: {body!r:.80}")
            state.update(
                up=reply.status == 200,
                paused=bool(body.get("paused")),
                spool_alarm=bool(body.get("spool_alarm")),
                spool_bytes=int(body.get("spool_bytes") or 0),
            )
        except Exception as exc:  # whatever it answered, the console goes on asking
            if state.get("up", True):
                log.warning("console: %s does not answer its health: %s", url, exc)
            state.update(up=False)

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the console is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
