"""The configuration table (docs/configuration.md), generated from the settings classes and the CLI.

Every pydantic-settings class of the package (found in the source: a class whose body assigns
``model_config = SettingsConfigDict(...)``) gives one row per field: its environment variable,
default, description, and the service that reads it, which is the ``rollstream`` commands whose
``--help`` lists the variable. Variables the CLI reads outside any settings class (click's
``envvar``) are added from their options. So the table cannot drift from the code::

    python -m rollstream.cli.docs_config                                # print the table
    python -m rollstream.cli.docs_config --write docs/configuration.md  # replace the block
    python -m rollstream.cli.docs_config --check docs/configuration.md  # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import socket
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from rollstream.dev.docs_block import DocBlock
from rollstream.errors import ConfigurationError
from rollstream.settings import env_name

START = "<!-- config-table:start -->"
END = "<!-- config-table:end -->"
REGENERATE = "python -m rollstream.cli.docs_config --write docs/configuration.md"
BLOCK = DocBlock(START, END, "the configuration table", REGENERATE)

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the rollstream package

#: Classes nearly every command reads: naming all the commands would say less than this.
SHARED: dict[str, str] = {
    "KafkaSettings": "every Kafka client",
    "StatePaths": "every local process",
}
#: Classes also read by library code, not only by commands.
LIBRARY: dict[str, str] = {
    "TrainerSettings": "`TrajectoryStream`",
}
#: Defaults computed at run time, described instead of evaluated on this machine.
FACTORY_DEFAULTS: dict[Callable[..., Any], str] = {
    socket.gethostname: "the host name",
}
FIELD_DEFAULTS: dict[tuple[str, str], str] = {
    ("StatePaths", "state_dir"): "`$XDG_STATE_HOME/rollstream` (`~/.local/state/rollstream`)",
    ("StatePaths", "cache_dir"): "`$XDG_CACHE_HOME/rollstream` (`~/.cache/rollstream`)",
}

_ENV = re.compile(r"\s*\[env: ([A-Z0-9_]+)\]")
# "Default: X." inside a description (the sentence runs to the end or to the next ". ").
_DEFAULT_SENTENCE = re.compile(r"\s*\bdefault: (.+?)(?:\.\s+|\.?$)", re.IGNORECASE)


@dataclass(frozen=True)
class Row:
    """One environment variable of the table."""

    env: str
    default: str
    description: str
    service: str


def _is_settings_class(node: ast.ClassDef) -> bool:
    for stmt in node.body:
        target: ast.expr | None = None
        if isinstance(stmt, ast.AnnAssign):
            target = stmt.target
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
        value = getattr(stmt, "value", None)
        if (
            isinstance(target, ast.Name)
            and target.id == "model_config"
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "SettingsConfigDict"
        ):
            return True
    return False


def settings_classes(package_dir: Path = PACKAGE_DIR) -> list[type[BaseSettings]]:
    """Every settings class of the package, ordered by env prefix, then class name.

    Found by reading the source, so that modules are imported only when they hold one (some,
    such as the mitmproxy script, are not meant to be imported casually).
    """
    found: list[type[BaseSettings]] = []
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and _is_settings_class(n)]
        if not names:
            continue
        relative = path.relative_to(package_dir.parent).with_suffix("")
        module = importlib.import_module(".".join(relative.parts))
        for name in names:
            cls = getattr(module, name)
            if not (isinstance(cls, type) and issubclass(cls, BaseSettings)):
                raise ConfigurationError(f"{module.__name__}.{name} is not a BaseSettings class")
            found.append(cls)
    return sorted(found, key=lambda c: (str(c.model_config.get("env_prefix", "")), c.__name__))


@dataclass
class CliUse:
    """Where the CLI reads an environment variable, and the option reading it."""

    commands: set[str]
    option: click.Option


def cli_env_vars(root: click.Command | None = None) -> dict[str, CliUse]:
    """Each variable the CLI reads: its help's ``[env: NAME]`` or click's ``envvar``."""
    if root is None:
        from rollstream.cli import cli

        root = cli
    uses: dict[str, CliUse] = {}

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            for name, sub in _visible(command):
                walk(sub, [*path, name])
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            names = set(_ENV.findall(param.help or ""))
            if isinstance(param.envvar, str):
                names.add(param.envvar)
            for name in names:
                use = uses.setdefault(name, CliUse(set(), param))
                use.commands.add(" ".join(path))

    walk(root, [])
    return uses


def _visible(group: click.Group) -> list[tuple[str, click.Command]]:
    """The subcommands sorted by name, without the hidden ones.

    Hidden commands are aliases of visible ones (``up`` of ``stack up``): the table names each
    command once, by the name the help shows.
    """
    visible = [(name, sub) for name, sub in group.commands.items() if not sub.hidden]
    return sorted(visible, key=lambda item: item[0])


def _leaf_commands(root: click.Command, path: list[str]) -> list[str]:
    if isinstance(root, click.Group):
        # A group that runs by itself (``console``) is a command too, beside its subcommands.
        out: list[str] = [" ".join(path)] if root.invoke_without_command else []
        for name, sub in _visible(root):
            out += _leaf_commands(sub, [*path, name])
        return out
    return [" ".join(path)]


def describe_commands(commands: Iterable[str], root: click.Command | None = None) -> str:
    """Commands as table text; a group whose every command is listed becomes ``group …``."""
    if root is None:
        from rollstream.cli import cli

        root = cli
    wanted = set(commands)
    if "" in wanted:
        return "every command"
    parts: list[str] = []
    assert isinstance(root, click.Group)
    for name, sub in _visible(root):
        leaves = _leaf_commands(sub, [name])
        listed = [leaf for leaf in leaves if leaf in wanted]
        if isinstance(sub, click.Group) and listed and len(listed) == len(leaves):
            parts.append(f"`{name} …`")
        else:
            parts += [f"`{leaf}`" for leaf in listed]
    return ", ".join(parts)


def _split_default(description: str) -> tuple[str, str | None]:
    """The description without its "Default: X." sentence, and X (None if it has none)."""
    match = _DEFAULT_SENTENCE.search(description)
    if match is None:
        return description, None
    rest = (description[: match.start()] + " " + description[match.end() :]).strip()
    if rest.endswith((";", ",")):  # "Where X is made; default: Y." loses its second half
        rest = rest[:-1] + "."
    return rest, match.group(1).strip()


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, SecretStr):
        return "(secret)"
    return f"`{value}`"


def _field_row(cls: type[BaseSettings], name: str, info: FieldInfo) -> Row:
    description, said = _split_default(info.description or "")
    if info.default_factory is not None:
        described = FIELD_DEFAULTS.get((cls.__name__, name)) or FACTORY_DEFAULTS.get(
            info.default_factory
        )
        default = described or said
        if default is None:
            raise ConfigurationError(
                f"{cls.__name__}.{name} has a computed default that the table cannot show: "
                "describe it in its description ('Default: ...') or in "
                "rollstream.cli.docs_config.FIELD_DEFAULTS"
            )
    elif info.default is None or info.default is PydanticUndefined:
        default = said or "unset"
    else:
        default = _literal(info.default)
        if said is not None:
            description = info.description or ""  # it adds to the value: keep it whole
    return Row(env_name(cls, name), default, description, "")


def _service(cls: type[BaseSettings], env: str, uses: dict[str, CliUse]) -> str:
    if cls.__name__ in SHARED:
        return SHARED[cls.__name__]
    parts = [LIBRARY[cls.__name__]] if cls.__name__ in LIBRARY else []
    if env in uses:
        parts.append(describe_commands(uses[env].commands))
    if not parts:
        raise ConfigurationError(
            f"{env} is read by no command: expose {cls.__name__} with settings_options or "
            "name its reader in rollstream.cli.docs_config.LIBRARY"
        )
    return "; ".join(parts)


def _option_row(env: str, use: CliUse) -> Row:
    help_text = _ENV.sub("", use.option.help or "").strip()
    description, said = _split_default(help_text)
    shown = use.option.show_default
    if isinstance(shown, str):
        default = f"`{shown}`"
    elif said is not None:
        default = said
    elif use.option.default is not None and not callable(use.option.default):
        default = _literal(use.option.default)
    else:
        default = "unset"
    return Row(env, default, description, describe_commands(use.commands))


def class_rows(cls: type[BaseSettings], uses: dict[str, CliUse]) -> list[Row]:
    """One row per field of ``cls``; ``uses`` says which commands list each variable."""
    out = []
    for name, info in cls.model_fields.items():
        row = _field_row(cls, name, info)
        out.append(replace(row, service=_service(cls, row.env, uses)))
    return out


def rows() -> list[Row]:
    """Every environment variable: settings fields first, then the CLI's own variables."""
    uses = cli_env_vars()
    out: list[Row] = []
    for cls in settings_classes():
        out += class_rows(cls, uses)
    envs = [row.env for row in out]
    twice = sorted({env for env in envs if envs.count(env) > 1})
    if twice:
        raise ConfigurationError(f"defined by two settings classes: {', '.join(twice)}")
    out += [_option_row(env, uses[env]) for env in sorted(uses) if env not in set(envs)]
    return out


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: pipes escaped, HTML-like text outside code too."""
    pieces = text.replace("|", "\\|").split("`")
    for i in range(0, len(pieces), 2):  # even pieces are outside code spans
        pieces[i] = pieces[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(pieces)


def markdown_table(table_rows: list[Row] | None = None) -> str:
    """The table as Markdown (no trailing newline)."""
    lines = ["| variable | default | meaning | read by |", "|---|---|---|---|"]
    for row in rows() if table_rows is None else table_rows:
        cells = [f"`{row.env}`", row.default, row.description, row.service]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def document_table(text: str) -> str:
    """The table between the markers of a document's text."""
    return BLOCK.body(text)


def replace_table(text: str, table: str) -> str:
    """``text`` with the block between the markers replaced by ``table``."""
    return BLOCK.replace(text, table)


def main(argv: list[str] | None = None) -> int:
    """Print the table, or write it into / check it against a document."""
    parser = argparse.ArgumentParser(
        prog="python -m rollstream.cli.docs_config", description=__doc__
    )
    BLOCK.add_arguments(parser, "FILE")
    return BLOCK.run(parser.parse_args(argv), markdown_table(), out=sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
