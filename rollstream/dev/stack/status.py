"""``rollstream status``: each service, every consumer group's lag, the records per topic."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp

from rollstream.dev.stack.processes import StackState, healthy
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.lag import GroupLag, group_lags
from rollstream.schemas import Topic, TopicNames


@dataclass(frozen=True)
class ComponentStatus:
    """One service: pid, running, healthy, where."""

    name: str
    pid: int
    running: bool
    healthy: bool
    endpoint: str | None


@dataclass
class StackStatus:
    """Everything ``rollstream status`` prints."""

    components: list[ComponentStatus] = field(default_factory=list)
    lags: list[GroupLag] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)  # topic -> records held
    broker: str = ""
    broker_error: str | None = None

    def table(self) -> str:
        """Human-readable, one block per kind."""
        lines = [f"broker {self.broker}" + (f": {self.broker_error}" if self.broker_error else "")]
        lines.append("")
        lines.append(f"{'service':<14} {'pid':>8}  {'state':<10} endpoint")
        for c in self.components:
            state = "healthy" if c.healthy else "running" if c.running else "stopped"
            lines.append(f"{c.name:<14} {c.pid:>8}  {state:<10} {c.endpoint or ''}")
        if self.lags:
            lines += ["", f"{'consumer group':<40} {'topic':<32} {'lag':>8}"]
            lines += [f"{g.group:<40} {g.topic:<32} {g.lag:>8}" for g in self.lags]
        if self.records:
            lines += ["", f"{'topic':<32} {'records':>10}"]
            lines += [f"{t:<32} {n:>10}" for t, n in self.records.items()]
        return "\n".join(lines)


async def stack_status(state: StackState) -> StackStatus:
    """Ask every service and the broker."""
    status = StackStatus(broker=state.bootstrap_servers)
    timeout = aiohttp.ClientTimeout(total=3)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for running in state.components:
            alive = running.alive()
            status.components.append(
                ComponentStatus(
                    running.name,
                    running.pid,
                    alive,
                    alive and await healthy(running, http),
                    running.endpoint,
                )
            )
    kafka = state.kafka()
    names = TopicNames(state.topic_prefix)
    ours = [names[t] for t in Topic if t not in (Topic.SCHEMAS, Topic.STATE)]
    try:
        async with TopicAdmin(kafka) as admin:
            existing = set(await admin.list_topics())
            described = await admin.describe([t for t in ours if t in existing])
        status.records = {d.name: d.records for d in described}
        status.lags = await group_lags(kafka, set(status.records))
    except Exception as exc:  # a status report says the broker is away; it does not fail
        status.broker_error = f"{type(exc).__name__}: {exc}"
    return status
