"""The command layout: help sections, the ``stack`` group, and the old names that keep working."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from rollstream.cli import ALIASES, SECTIONS, cli
from rollstream.cli.docs_config import cli_env_vars, describe_commands
from rollstream.cli.group import Group, alias

#: Every top-level name the CLI had before the groups; each must keep working.
OLD_NAMES = [
    "up",
    "down",
    "status",
    "kafka",
    "topics",
    "bench",
    "backend",
    "demo",
    "smoke",
    "ablate",
    "report",
    "example-trainer",
    "interceptor",
    "node",
    "run",
    "reconstruct",
    "score",
    "replay",
    "check",
    "export",
    "tail",
    "models",
    "harness",
]


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], prog_name="rollstream")
    assert result.exit_code == 0, result.output
    return result.output


def _listed(help_text: str) -> list[tuple[str, str]]:
    """(section heading, command name) for each command line of a help text."""
    out: list[tuple[str, str]] = []
    heading = ""
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
        elif heading not in ("", "Options", "Usage") and (match := re.match(r"  (\S+)", line)):
            out.append((heading, match.group(1)))
    return out


def _options(help_text: str) -> str:
    return help_text[help_text.index("Options:") :]


@pytest.mark.parametrize("name", OLD_NAMES)
def test_every_old_command_name_still_works(name: str) -> None:
    assert f"Usage: rollstream {name}" in _help(name)


def test_root_help_lists_each_command_once_under_its_section() -> None:
    listed = _listed(_help())
    expected = [
        (title, name) for title, entries in SECTIONS for _module, _attribute, name in entries
    ]
    assert listed == expected
    assert [title for title, _ in SECTIONS] == [
        "Interceptor and producers (run harness sessions, record every model call)",
        "Consumers (trajectories and rewards from the recorded calls)",
        "Data (topics, records, model vocabularies)",
        "Development tools (all of it on one machine; the 'dev' extra)",
    ]
    product = {name for title, name in listed if not title.startswith("Development")}
    assert {"interceptor", "node", "run", "reconstruct", "score", "export", "tail"} <= product
    tools = {name for title, name in listed if title.startswith("Development")}
    assert {"stack", "kafka", "bench", "backend", "demo", "smoke", "report"} <= tools
    assert not set(ALIASES) & {name for _, name in listed}, "aliases are hidden"


def test_every_visible_command_is_in_a_section() -> None:
    ctx = click.Context(cli)
    visible = {n for n in cli.list_commands(ctx) if not cli.commands[n].hidden}
    assert visible == {name for _, entries in SECTIONS for _m, _a, name in entries}
    assert {n for n in cli.commands if cli.commands[n].hidden} == set(ALIASES)


def test_stack_group_lists_up_status_down_in_that_order() -> None:
    text = _help("stack")
    assert [name for _, name in _listed(text)] == ["up", "status", "down"]
    assert "`rollstream up`, `status` and `down` still work as aliases" in " ".join(text.split())


@pytest.mark.parametrize(("name", "path"), sorted(ALIASES.items()))
def test_an_alias_runs_the_same_command_with_the_same_options(name: str, path: str) -> None:
    stack = cli.commands["stack"]
    assert isinstance(stack, click.Group)
    target = stack.commands[path.split()[1]]
    old = cli.commands[name]
    assert old.hidden and old.callback is target.callback and old.params is target.params
    old_help, new_help = _help(name), _help(*path.split())
    assert f"Same as `rollstream {path}` (kept as an alias)." in old_help
    assert _options(old_help) == _options(new_help)


def test_the_groups_keep_their_subcommands() -> None:
    def names(group: str) -> list[str]:
        return [name for _, name in _listed(_help(group))]

    assert names("kafka") == ["fetch", "start", "run", "secrets", "stop", "status"]
    assert names("topics") == ["create", "list", "describe", "replicate"]
    assert {"backend", "interceptor", "reconstruct", "node", "all"} <= set(names("bench"))


def test_the_config_table_names_the_group_form_not_the_alias() -> None:
    uses = cli_env_vars()
    assert uses["ROLLSTREAM_STACK_HOST"].commands == {"stack up"}
    assert describe_commands(uses["ROLLSTREAM_TOPICS_PARTITIONS"].commands) == (
        "`stack up`, `topics create`"
    )


def test_commands_in_no_section_are_listed_last_not_lost() -> None:
    root = Group("root")
    root.section("First", click.Command("b", help="B."), click.Command("a", help="A."))
    root.add_command(click.Command("z", help="Z."))
    root.add_command(alias(click.Command("a", help="A."), "old-a", "a"))
    text = root.get_help(click.Context(root, info_name="root"))
    assert _listed(text) == [("First", "b"), ("First", "a"), ("Other commands", "z")]
