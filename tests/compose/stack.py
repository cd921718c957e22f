"""A static model of compose/: the files read the way Docker Compose reads them, no engine needed.

Compose files are interpolated (``${VAR:-default}``) with the variables given (none: every
default), merged file over file, and each rollstream service is tied to the ``rollstream`` CLI
command it runs and to the settings classes that command reads.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import click
import yaml
from pydantic_settings import BaseSettings

from rollstream.cli import cli
from rollstream.consumers.reconstruct.settings import ReconstructSettings
from rollstream.consumers.score.settings import ScoreSettings
from rollstream.consumers.trainer.settings import TrainerSettings
from rollstream.dev.backend.settings import BackendSettings
from rollstream.dev.examples.settings import ExampleTrainerSettings
from rollstream.interceptor.settings import InterceptorSettings
from rollstream.kafka.admin import TopicsSettings
from rollstream.producers.node.settings import NodeSettings
from rollstream.producers.publisher.client import PublisherSettings
from rollstream.settings import KafkaSettings, StatePaths, env_name
from tests.compose.docker_build import dockerfile_env

REPO = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPO / "compose"
BASE_FILE = COMPOSE_DIR / "docker-compose.yml"
CLUSTER_FILE = COMPOSE_DIR / "kafka-cluster.yml"
HOST_FILE = COMPOSE_DIR / "host-network.yml"
LOCAL_KAFKA_FILE = COMPOSE_DIR / "local-kafka.yml"
SECURE_KAFKA_FILE = COMPOSE_DIR / "secure-kafka.yml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
SCHEMA_FILE = Path(__file__).with_name("compose-spec.json")

Doc = dict[str, Any]

#: The settings classes each command we run reads (cross-checked against its --help).
COMMAND_SETTINGS: dict[tuple[str, ...], tuple[type[BaseSettings], ...]] = {
    ("topics", "create"): (KafkaSettings, TopicsSettings),
    ("interceptor",): (InterceptorSettings, KafkaSettings, PublisherSettings),
    ("reconstruct",): (ReconstructSettings, KafkaSettings),
    ("score",): (ScoreSettings, KafkaSettings),
    ("node",): (NodeSettings, KafkaSettings, PublisherSettings),
    ("backend",): (BackendSettings,),
    ("example-trainer",): (ExampleTrainerSettings, TrainerSettings, KafkaSettings),
}

_ENV_HELP = re.compile(r"\[env: ([A-Z0-9_]+)\]")


class CommandError(ValueError):
    """A service's command is not a command of the rollstream CLI, or its options are wrong."""


@dataclass(frozen=True)
class Reset:
    """Compose's ``!reset`` (drop what the files before set) or ``!override`` (replace it)."""

    value: Any
    override: bool = False


class _ComposeLoader(yaml.SafeLoader):
    """YAML as Compose reads it: the ``!reset`` and ``!override`` tags of Compose 2.24+."""


def _tagged(override: bool) -> Any:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> Reset:
        if isinstance(node, yaml.MappingNode):
            return Reset(loader.construct_mapping(node, deep=True), override)
        if isinstance(node, yaml.SequenceNode):
            return Reset(loader.construct_sequence(node, deep=True), override)
        return Reset(loader.construct_scalar(node) or None, override)  # type: ignore[arg-type]

    return construct


_ComposeLoader.add_constructor("!reset", _tagged(override=False))
_ComposeLoader.add_constructor("!override", _tagged(override=True))


def load_yaml(path: Path) -> Doc:
    """One YAML document as a mapping (``!reset`` and ``!override`` values as :class:`Reset`)."""
    doc = yaml.load(path.read_text(), Loader=_ComposeLoader)  # a SafeLoader, two tags more
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a mapping")
    return doc


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (comments and blank lines skipped); anything else is an error."""
    result: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"{path}:{number}: not KEY=VALUE: {line!r}")
        result[key] = value
    return result


def base_doc() -> Doc:
    """docker-compose.yml, uninterpolated."""
    return load_yaml(BASE_FILE)


def cluster_doc() -> Doc:
    """docker-compose.yml with kafka-cluster.yml merged onto it, uninterpolated."""
    return merge(load_yaml(BASE_FILE), load_yaml(CLUSTER_FILE))


def host_doc(*more: Path) -> Doc:
    """docker-compose.yml with host-network.yml, then ``more`` files, merged on, uninterpolated."""
    doc = merge(load_yaml(BASE_FILE), load_yaml(HOST_FILE))
    for path in more:
        doc = merge(doc, load_yaml(path))
    return doc


# --- interpolation ------------------------------------------------------------------------------

_REF = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
_EXPR = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?", re.S)


@dataclass(frozen=True)
class VarRef:
    """One ``${NAME<op><arg>}`` or ``$NAME`` in a compose value; op is "" for none."""

    name: str
    op: str
    arg: str


def variable_refs(text: str) -> list[VarRef]:
    """The variable references in ``text`` (``$$`` is an escaped dollar, not a reference)."""
    refs = []
    for match in _REF.finditer(text):
        if match["escaped"]:
            continue
        expr = _EXPR.fullmatch(match["braced"] if match["braced"] is not None else match["plain"])
        if expr is None:
            raise ValueError(f"bad interpolation {match[0]!r} in {text!r}")
        refs.append(VarRef(expr["name"], expr["op"] or "", expr["arg"] or ""))
    return refs


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    """``text`` with its references replaced as Compose does (unset and no default: "")."""

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        (ref,) = variable_refs(match[0])
        value = variables.get(ref.name)
        unset = value is None or (ref.op.startswith(":") and value == "")
        if ref.op in (":-", "-"):
            return ref.arg if unset else str(value)
        if ref.op in (":?", "?"):
            if unset:
                raise ValueError(f"required variable {ref.name} is unset: {ref.arg}")
            return str(value)
        if ref.op in (":+", "+"):
            return "" if unset else ref.arg
        return "" if value is None else value

    return _REF.sub(replace, text)


def walk_strings(node: Any) -> Iterator[str]:
    """Every string value in a YAML tree (keys excluded: Compose interpolates values only)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from walk_strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk_strings(value)


def interpolate_tree(node: Any, variables: Mapping[str, str]) -> Any:
    """A copy of a YAML tree with every string value interpolated."""
    if isinstance(node, str):
        return interpolate(node, variables)
    if isinstance(node, dict):
        return {k: interpolate_tree(v, variables) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(v, variables) for v in node]
    return node


#: Sequences an override replaces rather than extends (the Compose specification's merge rules).
REPLACED = frozenset({"command", "entrypoint", "test"})
#: Sequences an override extends (Compose merges them by target; the files here never collide).
APPENDED = frozenset({"volumes", "ports"})


def merge(base: Doc, override: Doc) -> Doc:
    """``override`` merged onto ``base`` like ``docker compose -f base -f override``.

    Mappings merge key by key; a scalar replaces; ``!reset`` drops the key and ``!override``
    replaces it. Of the sequences, those in REPLACED are replaced and those in APPENDED extended;
    an override that sets any other sequence the base has is refused rather than guessed.
    """
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, Reset):
            if value.override:
                result[key] = value.value
            else:
                result.pop(key, None)
        elif key not in result or key in REPLACED:
            result[key] = value
        elif key in APPENDED and isinstance(result[key], list) and isinstance(value, list):
            result[key] = [*result[key], *value]
        elif isinstance(result[key], dict) and isinstance(value, dict):
            result[key] = merge(result[key], value)
        elif isinstance(result[key], list) or isinstance(value, list):
            raise ValueError(f"override sets sequence {key!r} the base already has")
        else:
            result[key] = value
    return result


# --- the rollstream CLI -------------------------------------------------------------------------


def resolve_command(argv: Sequence[str]) -> tuple[tuple[str, ...], click.Command]:
    """The CLI path and command ``rollstream ARGV`` runs; its options parsed, nothing invoked."""
    command: click.Command = cli
    path: list[str] = []
    rest = list(argv)
    while isinstance(command, click.Group):
        if not rest or rest[0] not in command.commands:
            found = rest[0] if rest else "nothing"
            raise CommandError(f"rollstream {' '.join(path)}: no command {found!r}")
        name = rest.pop(0)
        path.append(name)
        command = command.commands[name]
    try:
        command.make_context(f"rollstream {' '.join(path)}", rest)
    except click.ClickException as exc:
        raise CommandError(
            f"rollstream {shlex.join([*path, *rest])}: {exc.format_message()}"
        ) from exc
    return tuple(path), command


def help_env_names(command: click.Command) -> set[str]:
    """The environment variables the options of ``command`` name in their help."""
    names: set[str] = set()
    for param in command.params:
        names.update(_ENV_HELP.findall(getattr(param, "help", None) or ""))
    return names


def class_env_names(cls: type[BaseSettings]) -> set[str]:
    """The environment variable of each field of a settings class."""
    return {env_name(cls, field) for field in cls.model_fields}


def global_env_names() -> set[str]:
    """Variables every command reads: the CLI group's options and the state paths."""
    return help_env_names(cli) | class_env_names(StatePaths)


def command_env_names(path: tuple[str, ...]) -> set[str]:
    """Every ROLLSTREAM_* variable the command at ``path`` reads."""
    names = global_env_names()
    for cls in COMMAND_SETTINGS[path]:
        names |= class_env_names(cls)
    return names


def build_settings[S: BaseSettings](cls: type[S], env: Mapping[str, str]) -> S:
    """``cls`` as a process with exactly these ROLLSTREAM_* variables would build it."""
    outside = {k: v for k, v in os.environ.items() if not k.startswith("ROLLSTREAM_")}
    with mock.patch.dict(os.environ, outside | dict(env), clear=True):
        return cls()


# --- the stack ----------------------------------------------------------------------------------


#: The variables Compose requires (``${NAME:?why}``: the control planes' tokens), as a test
#: sets them; every other variable has a default.
REQUIRED = {
    "INTERCEPTOR_ADMIN_TOKEN": "test-interceptor-admin-token",
    "NODE_API_TOKEN": "test-node-api-token",
    "BACKEND_ADMIN_TOKEN": "test-backend-admin-token",
}


class Stack:
    """An interpolated compose model; services, their environment and their commands.

    The required variables (``REQUIRED``) are set unless ``variables`` sets them otherwise.
    """

    def __init__(self, doc: Doc, variables: Mapping[str, str] | None = None) -> None:
        self.doc: Doc = interpolate_tree(doc, REQUIRED | dict(variables or {}))

    @property
    def services(self) -> dict[str, Doc]:
        """The services by name."""
        services: dict[str, Doc] = self.doc["services"]
        return services

    def profiles(self, name: str) -> list[str]:
        """The profiles a service belongs to (none: always enabled)."""
        profiles: list[str] = self.services[name].get("profiles", [])
        return profiles

    def enabled(self, active: Sequence[str]) -> set[str]:
        """The services ``docker compose --profile A ... up`` starts."""
        return {
            name
            for name in self.services
            if not self.profiles(name) or set(self.profiles(name)) & set(active)
        }

    def depends_on(self, name: str) -> dict[str, Doc]:
        """A service's dependencies in long form."""
        deps = self.services[name].get("depends_on", {})
        if isinstance(deps, list):
            return {dep: {"condition": "service_started"} for dep in deps}
        result: dict[str, Doc] = deps
        return result

    def names_on_network(self) -> dict[str, list[str]]:
        """DNS name on the default network -> the services answering to it (aliases too)."""
        names: dict[str, list[str]] = {name: [name] for name in self.services}
        for name, service in self.services.items():
            networks = service.get("networks") or {}
            if isinstance(networks, dict):
                for network in networks.values():
                    for alias in (network or {}).get("aliases", []):
                        names.setdefault(alias, []).append(name)
        return names

    def is_rollstream(self, name: str) -> bool:
        """Whether the service runs our image (built from compose/Dockerfile)."""
        build = self.services[name].get("build")
        return isinstance(build, dict) and build.get("dockerfile") == "compose/Dockerfile"

    def rollstream_services(self) -> list[str]:
        """The services running our image."""
        return [name for name in self.services if self.is_rollstream(name)]

    def command(self, name: str) -> list[str]:
        """The service's command as a list."""
        command = self.services[name].get("command", [])
        return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]

    def cli_path(self, name: str) -> tuple[str, ...]:
        """The rollstream command a rollstream service runs."""
        return resolve_command(self.command(name))[0]

    def env_files(self, name: str) -> list[Path]:
        """The env files a service loads, resolved against the compose directory."""
        files = self.services[name].get("env_file", [])
        files = [files] if isinstance(files, str | dict) else files
        return [COMPOSE_DIR / (f["path"] if isinstance(f, dict) else f) for f in files]

    def own_environment(self, name: str) -> dict[str, str]:
        """The service's ``environment:`` entries."""
        env = self.services[name].get("environment", {})
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        result = {}
        for key, value in env.items():
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise ValueError(f"{name}: {key}={value!r}: give strings (or integers)")
            result[key] = str(value)
        return result

    def environment(self, name: str) -> dict[str, str]:
        """The container's environment: image ENV, env files, then ``environment:``."""
        env = dockerfile_env() if self.is_rollstream(name) else {}
        for path in self.env_files(name):
            env |= parse_env_file(path)
        return env | self.own_environment(name)

    def settings[S: BaseSettings](self, name: str, cls: type[S]) -> S:
        """A settings class as the service's process builds it."""
        return build_settings(cls, self.environment(name))
