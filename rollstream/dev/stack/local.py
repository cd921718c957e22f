"""Bringing the local stack up and down from one state directory."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from rollstream.dev.broker.cluster import ClusterInfo, local_kafka
from rollstream.dev.broker.process import LocalBroker
from rollstream.dev.broker.records import BrokerInfo
from rollstream.dev.broker.secure import SecureFiles, client_env
from rollstream.dev.broker.settings import BrokerSettings
from rollstream.dev.stack.components import plan, served_model
from rollstream.dev.stack.processes import (
    Running,
    StackState,
    healthy,
    log_tail,
    output,
    spawn,
    state_path,
    terminate,
)
from rollstream.dev.stack.settings import StackSettings
from rollstream.dev.stack.status import StackStatus, stack_status
from rollstream.dev.stack.tokens import StackTokens
from rollstream.errors import ConfigurationError
from rollstream.kafka.admin import TopicAdmin, TopicsSettings
from rollstream.lifecycle import LISTENING, announced
from rollstream.schemas import TopicNames, topic_specs
from rollstream.settings import KafkaSettings, StatePaths

Progress = Callable[[str], None]
#: Each service's principal on a secure broker (``rollstream/dev/broker/acls.py``).
PRINCIPALS = {
    "interceptor": "interceptor",
    "reconstructor": "reconstructor",
    "scorer": "scorer",
    "node": "node",
}


class LocalStack:
    """The stack under ``paths.state_dir``: ``up()``, ``status()``, ``down()``."""

    def __init__(
        self,
        settings: StackSettings,
        paths: StatePaths,
        broker: BrokerSettings | None = None,
        topics: TopicsSettings | None = None,
    ) -> None:
        self.settings = settings
        self.paths = paths
        self.broker = broker or BrokerSettings()
        self.topics = topics or TopicsSettings()
        self.dir = paths.state_dir / "stack"
        self.state_file = state_path(paths.state_dir)

    def state(self) -> StackState | None:
        """What was brought up, if anything."""
        return StackState.load(self.state_file)

    async def up(self, kafka: KafkaSettings, progress: Progress = lambda _: None) -> StackState:
        """Start the broker (unless one is configured), the topics, then each service in turn.

        A service that does not become healthy stops the start: everything started is stopped
        again and the error quotes its log.
        """
        previous = self.state()
        if previous is not None and any(c.alive() for c in previous.components):
            raise ConfigurationError(
                f"a stack is already up in {self.paths.state_dir}; `rollstream down` first"
            )
        if self.settings.engine == "vllm" and self.settings.upstream is None:
            # First-time builds before any service's start timeout runs: the engine's install
            # (minutes, once) and the family's tiny model.
            from rollstream.dev.engine.serve import prepare

            family = served_model(self.settings).family
            progress(f"engine       vLLM and the tiny {family} model (minutes the first time)")
            await asyncio.to_thread(prepare, family, self.paths)
        started_broker = False
        secure: SecureFiles | None = None
        if "ROLLSTREAM_BOOTSTRAP_SERVERS" not in os.environ:
            local = local_kafka(self.broker, self.paths, topic_prefix=kafka.topic_prefix)
            started_broker = local.running() is None
            start: Callable[[], BrokerInfo | ClusterInfo] = local.start
            info = await asyncio.to_thread(start)
            kafka = KafkaSettings(
                **(kafka.model_dump() | {"bootstrap_servers": info.bootstrap_servers})
            )
            secure = local.secure if isinstance(local, LocalBroker) else None
            progress(f"kafka        {info.bootstrap_servers}" + (" (secure)" if secure else ""))
        state = StackState(kafka.bootstrap_servers, kafka.topic_prefix, started_broker)
        state.kafka_secure = str(secure.root) if secure else None
        state.save(self.state_file)
        names = TopicNames(kafka.topic_prefix)
        async with TopicAdmin(state.kafka("topics") if secure else kafka) as admin:
            specs = topic_specs(names, self.topics.partitions, self.topics.retention_days)
            await admin.create(
                specs, self.topics.replication_factor, self.topics.min_insync_replicas
            )
        env = {
            "ROLLSTREAM_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "ROLLSTREAM_TOPIC_PREFIX": kafka.topic_prefix,
            "ROLLSTREAM_STATE_DIR": str(self.paths.state_dir),
            "ROLLSTREAM_CACHE_DIR": str(self.paths.cache_dir),
        }
        tokens = StackTokens.kept(self.paths.state_dir)
        urls: dict[str, str] = {}  # what the services started so far announced
        try:
            for planned in plan(self.settings):
                component = planned.resolved(urls)
                own = env | tokens.env(component.name) | self._principal(state, component.name)
                running = spawn(component, self.dir / "logs", own)
                state.components.append(running)
                state.save(self.state_file)
                began = time.monotonic()
                deadline = began + (component.start_timeout_s or self.settings.start_timeout_s)
                if component.listens:
                    urls |= await self._wait_announced(running, component.listens, deadline)
                    listening = component.resolved(urls)
                    running.health, running.endpoint = listening.health, listening.endpoint
                    running.url = listening.url
                    state.save(self.state_file)
                await self._wait_healthy(running, deadline)
                progress(
                    f"{running.name:<12} {running.endpoint or 'ready'} "
                    f"({time.monotonic() - began:.1f}s, pid {running.pid})"
                )
        except BaseException:
            self.down()
            raise
        return state

    @staticmethod
    def _principal(state: StackState, component: str) -> dict[str, str]:
        """On a secure broker, ``component``'s own principal (the backend has no Kafka)."""
        if state.kafka_secure is None or component not in PRINCIPALS:
            return {}
        return client_env(SecureFiles(Path(state.kafka_secure)), PRINCIPALS[component])

    async def _wait_announced(
        self, running: Running, names: tuple[str, ...], deadline: float
    ) -> dict[str, str]:
        """The URLs ``running`` announces once it listens (it bound the ports it was given)."""
        while True:
            urls = announced(output(running))
            if all(name in urls for name in names):
                return {name: urls[name] for name in names}
            self._still_starting(running, deadline, f"not listening (no {LISTENING!r} line)")
            await asyncio.sleep(0.1)

    async def _wait_healthy(self, running: Running, deadline: float) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http:
            while not await healthy(running, http):
                self._still_starting(running, deadline, "not healthy")
                await asyncio.sleep(0.2)

    def _still_starting(self, running: Running, deadline: float, what: str) -> None:
        """Raise, quoting its log, if ``running`` exited or ``deadline`` passed."""
        if not running.alive():
            raise ConfigurationError(
                f"{running.name} exited during start-up; its log ({running.log}) ends:\n"
                f"{log_tail(running)}"
            )
        if time.monotonic() > deadline:
            raise ConfigurationError(
                f"{running.name} {what} after {self.settings.start_timeout_s:.0f}s; "
                f"its log ({running.log}) ends:\n{log_tail(running)}"
            )

    async def status(self) -> StackStatus:
        """Each service, consumer lags, records per topic."""
        state = self.state()
        if state is None:
            raise ConfigurationError(f"no stack is up in {self.paths.state_dir} (`rollstream up`)")
        return await stack_status(state)

    def down(self) -> list[tuple[str, str]]:
        """Stop the services in reverse order, then the broker if ``up`` started it."""
        state = self.state()
        if state is None:
            return []
        outcomes = [
            (c.name, terminate(c, self.settings.stop_timeout_s)) for c in reversed(state.components)
        ]
        if state.started_broker:
            stopped = local_kafka(self.broker, self.paths).stop()
            outcomes.append(("kafka", "stopped" if stopped else "not running"))
        self.state_file.unlink(missing_ok=True)
        return outcomes

    @property
    def logs(self) -> Path:
        """Where each service's log is."""
        return self.dir / "logs"
