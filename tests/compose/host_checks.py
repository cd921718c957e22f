"""Static checks of the stack on the host's network (host-network.yml, local-kafka.yml).

On the host's network there are no service names: every service listens on its own port of
127.0.0.1 and every address is 127.0.0.1:PORT. So the checks are by port: each address a
service is given is a port that a service enabled with it listens on, no two services enabled
together listen on one port, and each healthcheck asks its own service's port.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rollstream.dev.broker import BrokerSettings
from tests.compose.checks import (
    HEALTH_URL,
    KAFKA_HEALTH,
    PROFILE_SETS,
    endpoints,
    healthcheck_text,
    is_kafka,
    is_vllm,
    listeners,
    listening_ports,
    runnable,
    settings_of,
)
from tests.compose.stack import Stack, build_settings

LOOPBACK = "127.0.0.1"


def runs_local_kafka(stack: Stack, name: str) -> bool:
    """Whether the service is the broker of local-kafka.yml (``rollstream kafka run``)."""
    return stack.command(name) == ["kafka", "run"]


def ports_of(stack: Stack, name: str) -> set[int]:
    """The ports a service listens on, on the host's network."""
    if runs_local_kafka(stack, name):
        broker = build_settings(BrokerSettings, stack.own_environment(name))
        return {broker.port, broker.controller_port}
    return listening_ports(stack, name)


def check_host_mode(stack: Stack) -> list[str]:
    """Every service on the host's network, with nothing that needs a network of its own."""
    problems = []
    for name, service in stack.services.items():
        if service.get("network_mode") != "host":
            problems.append(f"{name}: not on the host's network")
        for key in ("ports", "networks"):
            if service.get(key):
                problems.append(f"{name}: {key} on the host's network")
    return problems


def check_host_ports(
    stack: Stack, profile_sets: Iterable[Sequence[str]] = PROFILE_SETS
) -> list[str]:
    """Addresses reach a listening port; no port is taken twice; healthchecks ask their own."""
    problems = []
    for active in profile_sets:
        enabled = sorted(stack.enabled(active))
        owner: dict[int, str] = {}
        for name in enabled:
            for port in ports_of(stack, name):
                if port in owner:
                    problems.append(f"profiles {list(active)}: {owner[port]} and {name} on {port}")
                owner[port] = name
        for name in enabled:
            if name not in runnable(stack):
                continue
            for settings in settings_of(stack, name):
                for field, host, port in endpoints(settings):
                    if field == "upstream" and not {"backend", "vllm"} & set(enabled):
                        continue  # no profile, no policy server: the user points it outside
                    if host != LOOPBACK:
                        problems.append(f"{name}: {field} -> {host}:{port}, not {LOOPBACK}")
                    elif port not in owner:
                        problems.append(f"profiles {list(active)}: {name}: {field} -> {port}")
        for name in enabled:
            health = healthcheck_text(stack, name)
            for port in map(int, HEALTH_URL.findall(health) + KAFKA_HEALTH.findall(health)):
                if port not in ports_of(stack, name):
                    problems.append(f"{name}: healthcheck asks port {port}")
    return problems


def check_bound_to_loopback(stack: Stack) -> list[str]:
    """Servers bind 127.0.0.1: on the host's network 0.0.0.0 is every interface of the host."""
    problems = []
    for name in runnable(stack):
        for settings in settings_of(stack, name):
            host = getattr(settings, "host", None)
            if host is not None and host != LOOPBACK:
                problems.append(f"{name}: binds {host}")
    for name in stack.services:
        if is_vllm(stack, name):
            command = stack.command(name)
            if command[command.index("--host") + 1] != LOOPBACK:
                problems.append(f"{name}: binds {command[command.index('--host') + 1]}")
        if is_kafka(stack, name):
            for host, _ in listeners(stack, name, "KAFKA_LISTENERS").values():
                if host != LOOPBACK:
                    problems.append(f"{name}: a listener on {host or 'every interface'}")
    return problems
