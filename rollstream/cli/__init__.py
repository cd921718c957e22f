"""The ``rollstream`` command line."""

from __future__ import annotations

import importlib
import logging
import os

import click

from rollstream import __version__
from rollstream.cli.extras import unavailable_command
from rollstream.cli.group import Group, alias


@click.group(cls=Group)
@click.version_option(__version__, prog_name="rollstream")
@click.option(
    "--log-level",
    default=lambda: os.environ.get("ROLLSTREAM_LOG_LEVEL", "INFO"),
    show_default="INFO",
    help="Logging level. [env: ROLLSTREAM_LOG_LEVEL]",
)
def cli(log_level: str) -> None:
    """Token-faithful RL rollouts from any agent harness, streamed through Apache Kafka.

    The product: the interceptor, producers and consumers, and the data commands on their
    topics. A trainer reads the scored groups with the library
    (`rollstream.consumers.trainer.TrajectoryStream`); `pip install rollstream` installs that
    client alone, and a command that needs more names the extra to install. The development
    tools run all of it on one machine, demonstrate and measure it. `rollstream COMMAND --help`
    tells more.
    """
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # aiokafka logs expected transient states (coordinator not yet elected) at ERROR.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, logging.getLogger().level))


#: The ``--help`` sections: heading, then (module of rollstream.cli, attribute, name) per command.
SECTIONS: list[tuple[str, list[tuple[str, str, str]]]] = [
    (
        "Interceptor and producers (run harness sessions, record every model call)",
        [
            ("interceptor", "interceptor", "interceptor"),
            ("node", "node", "node"),
            ("node", "run", "run"),
            ("harness", "harness", "harness"),
        ],
    ),
    (
        "Consumers (trajectories and rewards from the recorded calls)",
        [
            ("reconstruct", "reconstruct", "reconstruct"),
            ("score", "score", "score"),
            ("replay", "replay", "replay"),
            ("check", "check", "check"),
        ],
    ),
    (
        "Data (topics, records, model vocabularies)",
        [
            ("topics", "topics", "topics"),
            ("tail", "tail_command", "tail"),
            ("export", "export", "export"),
            ("console", "console", "console"),
            ("models", "models", "models"),
        ],
    ),
    (
        "Development tools (all of it on one machine; the 'dev' extra)",
        [
            ("demo", "demo_command", "demo"),
            ("stack", "stack", "stack"),
            ("kafka", "kafka", "kafka"),
            ("docker", "docker", "docker"),
            ("backend", "backend", "backend"),
            ("engine", "engine", "engine"),
            ("smoke", "smoke", "smoke"),
            ("example", "example_trainer", "example-trainer"),
            ("ablate", "ablate", "ablate"),
            ("report", "report", "report"),
            ("bench", "bench", "bench"),
        ],
    ),
]

#: Old spellings that keep working, hidden from ``--help``: alias name -> the command's path.
ALIASES: dict[str, str] = {"up": "stack up", "status": "stack status", "down": "stack down"}


def _load(module: str, attribute: str, name: str) -> click.Command:
    """The command ``attribute`` of ``rollstream.cli.<module>``, or a stand-in naming the extra.

    A module that cannot import an optional package at import time (its settings module does)
    still gets a line in ``--help`` instead of breaking the whole CLI.
    """
    try:
        command = getattr(importlib.import_module(f"rollstream.cli.{module}"), attribute)
    except ModuleNotFoundError as exc:
        standin = unavailable_command(name, exc.name or "")
        if standin is None:
            raise
        return standin
    if not isinstance(command, click.Command) or command.name != name:
        raise TypeError(f"rollstream.cli.{module}.{attribute} is not the command {name!r}")
    return command


def _register() -> None:
    for title, entries in SECTIONS:
        cli.section(title, *(_load(*entry) for entry in entries))
    for name, path in ALIASES.items():
        group, _, sub = path.partition(" ")
        target = cli.commands[group]
        if isinstance(target, click.Group):  # else the stand-in of a group that cannot load
            target = target.commands[sub]
        cli.add_command(alias(target, name, path))


_register()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="rollstream")
