"""The rollout node as a service: tasks from Kafka in, sessions run, lifecycle records out.

Tasks are read in a consumer group, so several nodes share the stream; ``intake`` holds what
the group guarantees (each sample of a task completes on one node across joins and leaves,
at least once across a crash, a backlog left on the topic for other nodes). SessionStarted and
SessionEnded go through the capture publisher (spooled while the broker is away), keyed by
session id, onto the events topic beside the interceptor's calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp import web

from rollstream.capture.node.intake import TaskIntake
from rollstream.capture.node.pool import NodeScheduler
from rollstream.capture.node.session import SessionRunner
from rollstream.capture.node.settings import NodeSettings
from rollstream.capture.publisher.client import CapturePublisher, PublisherSettings
from rollstream.errors import BrokerError
from rollstream.kafka.control import PolicyFollower
from rollstream.sandbox.runtimes import make_runtime
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    PolicyVersion,
    TopicNames,
)
from rollstream.settings import KafkaSettings, StatePaths

log = logging.getLogger(__name__)


def session_base_url(base_url: str, reply: Mapping[str, Any]) -> str | None:
    """Where a session's harness calls, from the interceptor's answer to its registration.

    A pool names the session's worker (``worker``, and its ``url``): the harness calls that
    worker directly, no hop through the pool. The worker is on the machine the node reaches the
    pool by, so the host stays ``base_url``'s (a worker's own view, e.g. 127.0.0.1 behind a
    container's network, may not be the node's) and only its port is taken. A single
    interceptor's reply changes nothing: ``base_url`` may reach it through a mapped port.
    """
    url = reply.get("url")
    if "worker" not in reply or not isinstance(url, str):
        return None
    port = urlsplit(url).port
    if port is None:
        return None
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


# Registration precedes a harness's start: an admin port that is not there must not delay it.
_REGISTRATION_TIMEOUT = aiohttp.ClientTimeout(total=2)


class Node:
    """Consumes tasks, runs their sessions, publishes their lifecycle; see the module docs."""

    def __init__(
        self,
        settings: NodeSettings,
        kafka: KafkaSettings,
        publisher: PublisherSettings | None = None,
        paths: StatePaths | None = None,
    ) -> None:
        self.settings = settings
        self.kafka = kafka
        self.names = TopicNames(kafka.topic_prefix)
        self.serializer = AvroSerializer()
        spool = (paths or StatePaths()).state_dir / "spool" / f"node-{settings.node_id}"
        self.publisher = CapturePublisher(
            kafka, publisher or PublisherSettings(), self.names.events, spool
        )
        self.runtime = make_runtime(settings)
        self.runner = SessionRunner(
            settings,
            self.runtime,
            self._emit,
            self._calls_of,
            register=self._register,
            forget=self._forget,
        )
        self.scheduler = NodeScheduler(self.runner, settings)
        self.intake = TaskIntake(
            settings, kafka, self.scheduler, self.serializer, settled=self.publisher.settled
        )
        self.scheduler.on_ended = self.intake.on_ended
        self.policy = PolicyFollower(kafka, self._on_policy)
        self._http: aiohttp.ClientSession | None = None
        self._api: web.AppRunner | None = None
        self.port = settings.port

    def _on_policy(self, version: PolicyVersion) -> None:
        log.info("policy version %d: stamped into sessions from now on", version.version)
        self.runner.policy_version = version.version

    async def start(self) -> None:
        """Publisher, scheduler, HTTP API, then the task consumer."""
        from rollstream.capture.node.api import NodeApi

        await self.publisher.start()
        await self.policy.start()
        await self.scheduler.start()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        self._api = web.AppRunner(NodeApi(self).app(), access_log=None)
        await self._api.setup()
        await web.TCPSite(self._api, self.settings.host, self.settings.port).start()
        self.port = self._api.addresses[0][1]
        await self.intake.start()

    async def stop(self) -> None:
        """Hand the task partitions over, stop what still runs, flush the records.

        Running sessions get ``handoff_timeout_s`` to finish; the others are cancelled and
        their samples left to the partitions' next owner (``intake``).
        """
        await self.intake.stop()
        await self.scheduler.close()
        await self.runtime.close()
        await self.policy.stop()
        if self._api is not None:
            await self._api.cleanup()
        if self._http is not None:
            await self._http.close()
        await self.publisher.stop()

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def tasks_seen(self) -> int:
        """Task records taken off the topic (a record taken again after a move counts again)."""
        return self.intake.metrics.tasks

    @property
    def url(self) -> str:
        """The HTTP API's base URL."""
        return f"http://{self.settings.host}:{self.port}"

    async def _emit(self, record: AvroRecord) -> None:
        session = str(getattr(record, "session_id", ""))
        self.publisher.publish(session.encode(), self.serializer.encode(record))

    async def _register(self, session: str, context: str | None) -> str | None:
        """Register the session before its harness is launched; where the harness must call.

        Registered, its calls are accepted by an interceptor in strict mode from the first, in
        the context mode its task asks; a pool answers with the worker that holds it.
        """
        reply = await self._registration("PUT", session, {"context": context} if context else None)
        return session_base_url(self.settings.base_url, reply)

    async def _forget(self, session: str) -> None:
        """Forget the session once it is over (strict mode: its key is refused from now on)."""
        await self._registration("DELETE", session)

    async def _registration(
        self, method: str, session: str, body: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Register (PUT) or forget (DELETE) the session on the interceptor's admin port.

        A failure is logged, never fatal (an empty reply): the harness's calls are then
        refused there (401), which its session's outcome shows, or rendered in the default
        mode, and go to the node's ``base_url``.
        """
        assert self._http is not None
        url = f"{self.settings.interceptor_admin.rstrip('/')}/sessions/{session}"
        try:
            async with self._http.request(
                method, url, json=body, timeout=_REGISTRATION_TIMEOUT
            ) as reply:
                if reply.status >= 400:
                    log.warning("session %s: %s %s: %s", session, method, url, reply.status)
                answer = await reply.json(content_type=None)
                return answer if isinstance(answer, dict) else {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("session %s: %s %s failed: %s", session, method, url, exc)
            return {}

    async def _calls_of(self, session: str) -> int:
        """How many calls the interceptor recorded for the session, once none is in flight."""
        assert self._http is not None
        url = f"{self.settings.interceptor_admin.rstrip('/')}/sessions/{session}"
        for _ in range(50):  # a harness may exit while its last call is still being recorded
            try:
                async with self._http.get(url) as response:
                    body = await response.json()
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise BrokerError(f"the interceptor's admin port at {url}: {exc}") from exc
            if not body.get("in_flight"):
                return int(body.get("calls_recorded", 0))
            await asyncio.sleep(0.1)
        return int(body.get("calls_recorded", 0))
