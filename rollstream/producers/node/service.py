"""The rollout node as a service: tasks from Kafka in, sessions run, lifecycle records out.

Tasks are read in a consumer group, so several nodes share the stream; ``intake`` holds what
the group guarantees (each sample of a task completes on one node across joins and leaves,
at least once across a crash, a backlog left on the topic for other nodes). SessionStarted and
SessionEnded go through the capture publisher (spooled while the broker is away), keyed by
session id, onto the events topic beside the interceptor's calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp import web

from rollstream.errors import BrokerError
from rollstream.http_auth import auth_headers
from rollstream.kafka.control import PolicyFollower
from rollstream.producers.node.intake import TaskIntake
from rollstream.producers.node.pool import NodeScheduler
from rollstream.producers.node.session import SessionRunner
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.sandbox.runtimes import make_runtime
from rollstream.schemas import (
    AvroRecord,
    AvroSerializer,
    PolicyVersion,
    TopicNames,
)
from rollstream.schemas.control import SESSION_PATH
from rollstream.settings import KafkaSettings, StatePaths

log = logging.getLogger(__name__)


def worker_url(base_url: str, reply: Mapping[str, Any]) -> str | None:
    """The session's worker, from a pool's answer to its registration (None: not a pool's).

    The worker's address as the pool names it (``url``), with ``base_url``'s path: whatever
    path reaches the pool's router reaches a worker, which the router relays to untouched. A
    single interceptor's reply names no ``worker``: ``base_url`` is used as it is (it may reach
    the interceptor through a mapped port its own ``url`` does not know).
    """
    url = reply.get("url")
    if "worker" not in reply or not isinstance(url, str):
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # out of range: no address to call
        return None
    if not parts.hostname or port is None:
        return None
    return urlunsplit(parts._replace(path=urlsplit(base_url).path, query="", fragment=""))


class WorkerUrls:
    """Where each session's harness calls, given the interceptor's reply to its registration.

    ``pool``: always ``base_url`` (the pool's router, which routes by session). ``direct``: the
    worker's own address, checked once per worker address with a TCP connect: a node that
    reaches the pool through remapped ports (containers, port forwarding) may not reach its
    workers where the pool says they are, and then uses ``base_url``, with one warning. An
    address that failed is checked again after ``recheck_s`` (a worker caught restarting).
    """

    def __init__(
        self,
        base_url: str,
        mode: Literal["direct", "pool"],
        connect_timeout_s: float = 1.0,
        recheck_s: float = 30.0,
    ) -> None:
        self.base_url = base_url
        self.mode = mode
        self.connect_timeout_s = connect_timeout_s
        self.recheck_s = recheck_s
        self._failed_at: dict[str, float] = {}  # monotonic
        # One check per address, shared by the registrations that arrive while it runs.
        self._checks: dict[str, asyncio.Task[bool]] = {}

    async def for_reply(self, reply: Mapping[str, Any]) -> str | None:
        """The base URL the session's harness calls; None: the node's ``base_url``."""
        url = worker_url(self.base_url, reply)
        if url is None or self.mode == "pool":
            return None
        failed_at = self._failed_at.get(url)
        if failed_at is not None and time.monotonic() - failed_at >= self.recheck_s:
            del self._failed_at[url], self._checks[url]
        check = self._checks.get(url)
        if check is None:
            check = self._checks[url] = asyncio.create_task(self._reachable(url))
        if await asyncio.shield(check):
            return url
        self._failed_at.setdefault(url, time.monotonic())
        return None

    async def _reachable(self, url: str) -> bool:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(parts.hostname, parts.port), self.connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            log.warning(
                "interceptor worker at %s is not reachable from this node (%s): its sessions'"
                " harnesses call the pool at %s instead (set ROLLSTREAM_NODE_WORKER_URLS=pool"
                " to skip the check)",
                url,
                str(exc) or type(exc).__name__,
                self.base_url,
            )
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True


_REFUSED = (
    "refused the node's token (401): set ROLLSTREAM_NODE_INTERCEPTOR_TOKEN to the interceptor's"
    " ROLLSTREAM_INTERCEPTOR_ADMIN_TOKEN"
)


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
        self.worker_urls = WorkerUrls(settings.base_url, settings.worker_urls)

    def _on_policy(self, version: PolicyVersion) -> None:
        log.info("policy version %d: stamped into sessions from now on", version.version)
        self.runner.policy_version = version.version

    async def start(self) -> None:
        """Publisher, scheduler, HTTP API, then the task consumer."""
        from rollstream.producers.node.api import NodeApi

        await self.publisher.start()
        await self.policy.start()
        await self.scheduler.start()
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10),
            headers=auth_headers(self.settings.interceptor_token),
        )
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
        return await self.worker_urls.for_reply(reply)

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
        url = self._session_url(session)
        # Longer than a pool waits for its worker (see ``registration_timeout_s``).
        timeout = aiohttp.ClientTimeout(total=self.settings.registration_timeout_s)
        try:
            async with self._http.request(method, url, json=body, timeout=timeout) as reply:
                if reply.status == 401:
                    log.error("session %s: %s %s: %s", session, method, url, _REFUSED)
                elif reply.status >= 400:
                    log.warning("session %s: %s %s: %s", session, method, url, reply.status)
                answer = await reply.json(content_type=None)
                return answer if isinstance(answer, dict) else {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("session %s: %s %s failed: %s", session, method, url, exc)
            return {}

    async def _calls_of(self, session: str) -> int:
        """How many calls the interceptor recorded for the session, once none is in flight."""
        assert self._http is not None
        url = self._session_url(session)
        for _ in range(50):  # a harness may exit while its last call is still being recorded
            try:
                async with self._http.get(url) as response:
                    if response.status == 401:
                        raise BrokerError(f"the interceptor's admin port at {url}: {_REFUSED}")
                    body = await response.json()
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise BrokerError(f"the interceptor's admin port at {url}: {exc}") from exc
            if not body.get("in_flight"):
                return int(body.get("calls_recorded", 0))
            await asyncio.sleep(0.1)
        return int(body.get("calls_recorded", 0))

    def _session_url(self, session: str) -> str:
        """The session's route on the interceptor's admin port."""
        path = SESSION_PATH.format(session=session)
        return f"{self.settings.interceptor_admin.rstrip('/')}{path}"
