"""Static checks of a compose model: each returns the problems it found (empty: none).

Kept apart from the tests so that a test can feed a deliberately broken model and see the
check catch it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from tests.compose.stack import (
    COMMAND_SETTINGS,
    CommandError,
    Stack,
    command_env_names,
    parse_env_file,
)

#: Profile sets the README tells people to run with.
PROFILE_SETS: list[tuple[str, ...]] = [(), ("cpu",), ("gpu",)]
#: Commands serving GET /health, and the settings field holding its port.
HEALTH_PORT_FIELD: dict[tuple[str, ...], str] = {
    ("interceptor",): "admin_port",
    ("node",): "port",
    ("backend",): "port",
}

HEALTH_URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost):(\d+)/health\b")
KAFKA_HEALTH = re.compile(r"--bootstrap-server\s+(?:localhost|127\.0\.0\.1):(\d+)")
_LISTENER = re.compile(r"^(?P<name>[A-Z_]+)://(?P<host>[^:]*):(?P<port>\d+)$")


def is_kafka(stack: Stack, name: str) -> bool:
    """Whether the service runs the apache/kafka image."""
    return str(stack.services[name].get("image", "")).startswith("apache/kafka:")


def is_vllm(stack: Stack, name: str) -> bool:
    """Whether the service runs vLLM's OpenAI-compatible server."""
    return str(stack.services[name].get("image", "")).startswith("vllm/vllm-openai:")


def listeners(stack: Stack, name: str, key: str) -> dict[str, tuple[str, int]]:
    """A Kafka service's KAFKA_LISTENERS or KAFKA_ADVERTISED_LISTENERS: name -> (host, port)."""
    value = stack.environment(name).get(key, "")
    result = {}
    for item in filter(None, value.split(",")):
        match = _LISTENER.match(item.strip())
        if match is None:
            raise ValueError(f"{name}: {key}: cannot read {item!r}")
        result[match["name"]] = (match["host"], int(match["port"]))
    return result


def runnable(stack: Stack) -> list[str]:
    """The rollstream services whose command resolves to one we know the settings of."""
    names = []
    for name in stack.rollstream_services():
        try:
            if stack.cli_path(name) in COMMAND_SETTINGS:
                names.append(name)
        except CommandError:
            pass
    return names


def settings_of(stack: Stack, name: str) -> list[BaseModel]:
    """The settings a rollstream service's command builds from its environment."""
    return [stack.settings(name, cls) for cls in COMMAND_SETTINGS[stack.cli_path(name)]]


def listening_ports(stack: Stack, name: str) -> set[int]:
    """The ports the service's process listens on inside its container."""
    if name in runnable(stack):
        return {
            value
            for settings in settings_of(stack, name)
            for field, value in settings
            if (field == "port" or field.endswith("_port")) and isinstance(value, int)
        }
    if is_kafka(stack, name):
        return {port for _, port in listeners(stack, name, "KAFKA_LISTENERS").values()}
    if is_vllm(stack, name):
        command = stack.command(name)
        return {int(command[command.index("--port") + 1])} if "--port" in command else {8000}
    return set()


def container_port(entry: str | dict[str, object]) -> int:
    """The container side of a ``ports`` entry (short or long syntax)."""
    if isinstance(entry, dict):
        return int(str(entry["target"]))
    return int(str(entry).split("/")[0].rsplit(":", 1)[-1])


def healthcheck_text(stack: Stack, name: str) -> str:
    """The healthcheck's test as one string ("" if none)."""
    test = (stack.services[name].get("healthcheck") or {}).get("test", "")
    return " ".join(test) if isinstance(test, list) else str(test)


def check_commands(stack: Stack) -> list[str]:
    """Every rollstream service runs a real command whose options exist."""
    problems = []
    for name in stack.rollstream_services():
        try:
            path = stack.cli_path(name)
        except CommandError as exc:
            problems.append(f"{name}: {exc}")
            continue
        if path not in COMMAND_SETTINGS:
            problems.append(f"{name}: rollstream {' '.join(path)} has no settings mapping")
    return problems


def check_env_names(stack: Stack) -> list[str]:
    """Each ROLLSTREAM_* variable names a setting of a service that gets it.

    A service's own ``environment:`` must fit its own command; a shared env file's variable must
    fit at least one of the services loading the file.
    """
    problems = []
    readers: dict[Path, set[str]] = {}
    for name in runnable(stack):
        valid = command_env_names(stack.cli_path(name))
        for key in stack.own_environment(name):
            if key.startswith("ROLLSTREAM_") and key not in valid:
                problems.append(f"{name}: {key} is no setting of rollstream {stack.command(name)}")
        for path in stack.env_files(name):
            readers.setdefault(path, set()).update(valid)
    for path, valid in readers.items():
        for key in parse_env_file(path):
            if not key.startswith("ROLLSTREAM_"):
                problems.append(f"{path.name}: {key} is not a rollstream setting")
            elif key not in valid:
                problems.append(f"{path.name}: {key} is no setting of any service loading it")
    return problems


def check_settings_values(stack: Stack) -> list[str]:
    """Every rollstream service's settings validate from its environment."""
    problems = []
    for name in runnable(stack):
        for cls in COMMAND_SETTINGS[stack.cli_path(name)]:
            try:
                stack.settings(name, cls)
            except ValidationError as exc:
                problems.append(f"{name}: {cls.__name__}: {exc}")
    return problems


def check_ports(stack: Stack) -> list[str]:
    """Published ports and healthchecks use ports the service listens on; servers bind all."""
    problems = []
    for name, service in stack.services.items():
        ports = listening_ports(stack, name)
        for entry in service.get("ports", []):
            if container_port(entry) not in ports:
                problems.append(f"{name}: publishes {entry}, but listens on {sorted(ports)}")
        health = healthcheck_text(stack, name)
        for port in map(int, HEALTH_URL.findall(health) + KAFKA_HEALTH.findall(health)):
            if port not in ports:
                problems.append(f"{name}: healthcheck uses port {port}, listens on {sorted(ports)}")
        if name in runnable(stack) and ports:
            for settings in settings_of(stack, name):
                host = getattr(settings, "host", None)
                if host is not None and host != "0.0.0.0":
                    problems.append(f"{name}: listens on {host}, unreachable from other services")
    return problems


def check_healthchecks(stack: Stack) -> list[str]:
    """Servers with a /health endpoint have a healthcheck on it; Kafka asks the broker."""
    problems = []
    for name in stack.services:
        health = healthcheck_text(stack, name)
        port: int | None = None
        if name in runnable(stack):
            field = HEALTH_PORT_FIELD.get(stack.cli_path(name))
            if field is not None:
                port = next(
                    getattr(s, field)
                    for s in settings_of(stack, name)
                    if field in type(s).model_fields
                )
        elif is_vllm(stack, name):
            (port,) = listening_ports(stack, name)
        elif is_kafka(stack, name) and not KAFKA_HEALTH.search(health):
            problems.append(f"{name}: no healthcheck asking the broker")
        if port is not None and str(port) not in HEALTH_URL.findall(health):
            problems.append(f"{name}: no healthcheck on http://127.0.0.1:{port}/health")
    return problems


def check_dependencies(
    stack: Stack, profile_sets: Iterable[Sequence[str]] = PROFILE_SETS
) -> list[str]:
    """depends_on works for every profile set: targets exist, conditions can be met.

    As Compose does: a dependency disabled by the active profiles is an error unless it is
    ``required: false``; service_healthy needs a healthcheck; service_completed_successfully
    needs a one-shot service.
    """
    problems = []
    for name in stack.services:
        for dep, spec in stack.depends_on(name).items():
            if dep not in stack.services:
                problems.append(f"{name}: depends on undefined service {dep}")
                continue
            condition = spec.get("condition", "service_started")
            if condition == "service_healthy" and not stack.services[dep].get("healthcheck"):
                problems.append(f"{name}: waits for {dep} healthy; {dep} has no healthcheck")
            if condition == "service_completed_successfully" and (
                stack.services[dep].get("restart", "no") != "no"
            ):
                problems.append(f"{name}: waits for {dep} to complete; {dep} restarts")
    for active in profile_sets:
        enabled = stack.enabled(active)
        for name in sorted(enabled):
            for dep, spec in stack.depends_on(name).items():
                if dep in stack.services and dep not in enabled and spec.get("required", True):
                    problems.append(f"profiles {list(active)}: {name} needs {dep}, not enabled")
    return problems


def endpoints(settings: BaseModel) -> list[tuple[str, str, int]]:
    """(field, host, port) of every URL or bootstrap address among a settings' values."""
    found = []
    for field, value in settings:
        if not isinstance(value, str):
            continue
        if field == "bootstrap_servers":
            for address in value.split(","):
                host, _, port = address.strip().rpartition(":")
                found.append((field, host, int(port)))
        elif re.match(r"^https?://", value):
            parts = urlsplit(value)
            default = 443 if parts.scheme == "https" else 80
            found.append((field, parts.hostname or "", parts.port or default))
    return found


def check_addresses(stack: Stack) -> list[str]:
    """Every address a rollstream service is given names a service listening there.

    Kafka addresses must be a broker's advertised listener (clients reconnect to those).
    """
    problems = []
    names = stack.names_on_network()
    for name in runnable(stack):
        for settings in settings_of(stack, name):
            for field, host, port in endpoints(settings):
                if host not in names:
                    problems.append(f"{name}: {field} -> {host}:{port}: no such service")
                    continue
                for target in names[host]:
                    if field == "bootstrap_servers":
                        advertised = listeners(stack, target, "KAFKA_ADVERTISED_LISTENERS")
                        if (host, port) not in advertised.values():
                            problems.append(f"{name}: {host}:{port} is not advertised by {target}")
                    elif port not in listening_ports(stack, target):
                        problems.append(f"{name}: {field} -> {host}:{port}; {target} not there")
    return problems


def all_problems(stack: Stack) -> list[str]:
    """Every check above."""
    return [
        *check_commands(stack),
        *check_env_names(stack),
        *check_settings_values(stack),
        *check_ports(stack),
        *check_healthchecks(stack),
        *check_dependencies(stack),
        *check_addresses(stack),
    ]
