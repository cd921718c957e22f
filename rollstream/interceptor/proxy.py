"""Running the interceptor: mitmproxy with our addon and the publisher.

Reverse mode (default): harnesses use the proxy as their base URL. Forward mode: harnesses use
it as ``HTTPS_PROXY`` and trust its CA; LLM calls to any host go to the upstream (``forward``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from aiohttp import web
from mitmproxy import options
from mitmproxy.options import CONF_BASENAME
from mitmproxy.tools.dump import DumpMaster

from rollstream.errors import BrokerError, ConfigurationError
from rollstream.host import free_port
from rollstream.http_auth import token_file
from rollstream.interceptor import errorpages
from rollstream.interceptor.addon import RollstreamAddon
from rollstream.interceptor.admin import AdminApp, server_url
from rollstream.interceptor.forward import ForwardAddon
from rollstream.interceptor.registry import SessionRegistry
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.interceptor.websocket import Admitted, WebSocketBridge
from rollstream.kafka.control import PolicyFollower
from rollstream.kafka.schema_store import SchemaStore
from rollstream.producers.publisher.client import CapturePublisher, PublisherSettings
from rollstream.schemas import ApiKind, AvroSerializer, PolicyVersion, TopicNames
from rollstream.settings import KafkaSettings, StatePaths

log = logging.getLogger(__name__)


def session_hash_key(settings: InterceptorSettings, state_dir: Path) -> bytes:
    """The HMAC key naming unregistered keys' sessions: the setting's, else the state dir's.

    Made once (mode 0600) and shared by every interceptor of the state directory, a pool's
    workers among them, so a key keeps its session across processes and restarts.
    """
    key = settings.session_hash_key or token_file(state_dir / "sessions" / "hash.key")
    return key.get_secret_value().encode()


class Interceptor:
    """The proxy, its addon and the capture publisher, as one async resource."""

    def __init__(
        self,
        settings: InterceptorSettings,
        kafka: KafkaSettings,
        publisher: PublisherSettings | None = None,
        paths: StatePaths | None = None,
    ) -> None:
        self.settings = settings
        self.kafka = kafka
        self.serializer = AvroSerializer()
        paths = paths or StatePaths()
        # Port 0 is chosen now, not at start: the spool and registry are named after the port,
        # and every port-0 interceptor of a state directory would otherwise share one spool.
        self.port = settings.port or free_port(settings.host)
        # Named, not only numbered by port: a pool's workers keep theirs across port changes.
        name = settings.state_name or f"interceptor-{self.port}"
        spool = paths.state_dir / "spool" / name
        # Ours rather than mitmproxy's ~/.mitmproxy, so that tests and several state
        # directories each keep their own CA.
        self.confdir = (settings.confdir or paths.state_dir / "mitmproxy").expanduser()
        self.publisher = CapturePublisher(
            kafka, publisher or PublisherSettings(), TopicNames(kafka.topic_prefix).events, spool
        )
        registry = paths.state_dir / "sessions" / f"{name}.txt"
        self.addon = RollstreamAddon(
            settings,
            self.publisher.publish,
            SessionRegistry(registry),
            session_hash_key(settings, paths.state_dir),
        )
        self.websockets = WebSocketBridge(
            server_url(settings.host, self.port),
            self._websocket_refused,
            settings.max_body_bytes,
        )
        self.addon.websockets = self.websockets
        self.forward = (
            ForwardAddon(settings.upstream, settings.other_traffic)
            if settings.mode == "forward"
            else None
        )
        self.policy = PolicyFollower(kafka, self._on_policy) if settings.follow_policy else None
        self._master: DumpMaster | None = None
        self._task: asyncio.Task[None] | None = None
        self._admin: web.AppRunner | None = None
        self.admin_port = settings.admin_port

    def _websocket_refused(self, admitted: Admitted, status: int, message: str) -> None:
        self.addon.record_rejected(
            ApiKind.RESPONSES,
            admitted.session,
            admitted.caller,
            status,
            message,
            transport="websocket",
        )

    def _on_policy(self, version: PolicyVersion) -> None:
        log.info("policy version %d (from %s)", version.version, version.publisher or "?")
        self.addon.policy_version = version.version

    async def start(self) -> None:
        """Publish our schemas (if the broker is there), start the publisher and the proxy."""
        try:
            async with SchemaStore(self.kafka, self.serializer.registry) as store:
                await asyncio.wait_for(store.publish(), 10)
        except (BrokerError, TimeoutError, OSError, Exception) as exc:  # the broker may be away
            log.warning("schemas not published yet (%s); readers use the shipped ones", exc)
        await self.addon.exact.check_upstream(self.settings)
        await self.addon.served.start()
        await self.publisher.start()
        await self.websockets.start()
        if self.policy is not None:
            await self.policy.start()
        forward = self.settings.mode == "forward"
        opts = options.Options(
            listen_host=self.settings.host,
            listen_port=self.port,
            mode=["regular" if forward else f"reverse:{self.settings.upstream}"],
            confdir=str(self.confdir),
        )
        errorpages.install()
        self._master = DumpMaster(opts, with_termlog=False, with_dumper=False)
        # mitmproxy aborts start-up when anything logged an error meanwhile; a Kafka client
        # complaining that the broker is away must not stop the proxy.
        # Connect upstream per request, not when the harness connects: an absent upstream is
        # then an HTTP error the harness can read, not a dropped connection.
        self._master.options.update(connection_strategy="lazy")
        errorcheck = self._master.addons.get("errorcheck")
        if errorcheck is not None:
            self._master.addons.remove(errorcheck)
        self._master.addons.add(self.addon)
        if self.forward is not None:
            # After the addon: its request hook undoes the addon's rewrite on other traffic.
            self._master.addons.add(self.forward)
        self._task = asyncio.create_task(self._master.run(), name="mitmproxy")
        await self._wait_listening()
        admin = AdminApp(self.addon, self.publisher, url=server_url(self.settings.host, self.port))
        self._admin = web.AppRunner(admin.app(self.settings), access_log=None)
        await self._admin.setup()
        site = web.TCPSite(self._admin, self.settings.host, self.admin_port)
        await site.start()
        self.admin_port = self._admin.addresses[0][1]
        if forward:
            log.info(
                "forward proxy on %s (HTTPS_PROXY); harnesses must trust the CA %s",
                self.url,
                self.ca_cert_path,
            )

    async def _wait_listening(self, timeout: float = 20) -> None:
        async with asyncio.timeout(timeout):
            while True:
                if self._task is not None and self._task.done():
                    self._task.result()
                    raise ConfigurationError("the proxy stopped during start-up")
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection(self.settings.host, self.port)
                    writer.close()
                    await writer.wait_closed()
                    return
                await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Stop accepting calls, let those in flight finish (bounded), flush the publisher.

        Calls still running after ``drain_timeout_s`` are cut and recorded as failed; new
        calls arriving meanwhile on open connections are held and then cut unsent, so their
        harnesses retry them (against the restarted proxy). The publisher then sends or
        spools everything recorded.
        """
        if self._master is not None:
            # mitmproxy leaves its listening sockets to process exit; we may live on (tests,
            # the local stack), so close them first.
            proxyserver = self._master.addons.get("proxyserver")
            if proxyserver is not None:
                await proxyserver.servers.update([])
            await self._drain()
            # Before mitmproxy goes: the harnesses are told (1001, going away) and reconnect.
            await self.websockets.stop()
            self._master.shutdown()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        await self.websockets.stop()  # stopped already, unless the proxy never started
        if self._admin is not None:
            await self._admin.cleanup()
        if self.policy is not None:
            await self.policy.stop()
        self.addon.exact.close()
        await self.addon.served.stop()
        await self.publisher.stop()

    async def _drain(self) -> None:
        self.addon.gate.pause()  # until the shutdown: no call goes upstream any more
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.drain_timeout_s
        # In-flight calls end in mitmproxy hooks; polling the counter keeps those hooks simple.
        while self.addon.in_flight and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        cut = self.addon.record_unfinished(
            f"the interceptor stopped; the call was cut after {self.settings.drain_timeout_s:g} s"
        )
        if cut:
            log.warning("stopping: %d calls still in flight were cut and recorded as failed", cut)

    async def __aenter__(self) -> Interceptor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """The base URL harnesses point at."""
        # The listen host as configured, not ``server_url``'s: ``rollstream interceptor`` prints
        # it, and a wildcard there says where it listens (registrants are told ``server_url``).
        return f"http://{self.settings.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        """The admin port's base URL."""
        return f"http://{self.settings.host}:{self.admin_port}"

    @property
    def ca_cert_path(self) -> Path:
        """The CA certificate (PEM) that harnesses trust in forward mode; exists once started."""
        return self.confdir / f"{CONF_BASENAME}-ca-cert.pem"
