"""The configuration table generator: discovery, defaults, services, Markdown, its block."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

import rollstream.cli  # noqa: F401  (imports the modules of every command and its settings)
from rollstream.cli.docs_config import (
    END,
    REGENERATE,
    START,
    Row,
    class_rows,
    cli_env_vars,
    describe_commands,
    document_table,
    main,
    markdown_table,
    replace_table,
    rows,
    settings_classes,
)
from rollstream.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def _all_subclasses(cls: type) -> set[type]:
    out: set[type] = set()
    subclasses: list[type] = cls.__subclasses__()
    for sub in subclasses:
        out |= {sub} | _all_subclasses(sub)
    return out


def test_discovery_finds_every_settings_class_of_the_package() -> None:
    found = settings_classes()
    for module in ("rollstream.producers.publisher.client", "rollstream.dev.stack.settings"):
        importlib.import_module(module)
    imported = {
        c
        for c in _all_subclasses(BaseSettings)
        if c.__module__.startswith("rollstream.") and "model_config" in c.__dict__
    }
    assert imported <= set(found)
    names = {c.__name__ for c in found}
    assert {"KafkaSettings", "StatePaths", "InterceptorSettings", "PublisherSettings"} <= names


def test_every_variable_the_cli_lists_has_a_row_and_no_row_repeats() -> None:
    table = [row.env for row in rows()]
    assert len(table) == len(set(table))
    assert set(cli_env_vars()) <= set(table)
    assert {"ROLLSTREAM_LOG_LEVEL", "ROLLSTREAM_NODE_URL", "ROLLSTREAM_PUBLISHER_LINGER_MS"} <= set(
        table
    )


def test_compose_env_file_names_only_variables_in_the_table() -> None:
    text = (ROOT / "compose" / "rollstream.env").read_text(encoding="utf-8")
    used = set(re.findall(r"^\s*(ROLLSTREAM_[A-Z0-9_]+)=", text, re.MULTILINE))
    assert used, "the compose env file sets no rollstream variables?"
    assert used <= {row.env for row in rows()}


def test_rows_show_literal_computed_and_described_defaults() -> None:
    by_env = {row.env: row for row in rows()}
    assert by_env["ROLLSTREAM_INTERCEPTOR_PORT"] == Row(
        "ROLLSTREAM_INTERCEPTOR_PORT", "`8100`", "Port to listen on.", "`interceptor`"
    )
    assert by_env["ROLLSTREAM_NODE_KEEP_WORKDIRS"].default == "`false`"
    assert by_env["ROLLSTREAM_SASL_PASSWORD"].default == "unset"
    assert by_env["ROLLSTREAM_NODE_NODE_ID"].default == "the host name"
    # "Default: X" moves from the description into the default column.
    confdir = by_env["ROLLSTREAM_INTERCEPTOR_CONFDIR"]
    assert confdir.default == "<state dir>/mitmproxy"
    assert "Default" not in confdir.description
    assert by_env["ROLLSTREAM_NODE_WORK_ROOT"].description == "Where session directories are made."
    assert by_env["ROLLSTREAM_LOG_LEVEL"].default == "`INFO`"
    assert by_env["ROLLSTREAM_NODE_URL"].service == "`run`"
    # Every kafka command but `kafka secrets` (it makes files, it runs no broker).
    assert by_env["ROLLSTREAM_KAFKA_HEAP"].service == (
        "`kafka fetch`, `kafka run`, `kafka start`, `kafka status`, `kafka stop`"
    )
    assert by_env["ROLLSTREAM_PUBLISHER_SPOOL_DIR"].service == "`interceptor`, `node`"
    assert by_env["ROLLSTREAM_TRAINER_TOPIC"].service == "`TrajectoryStream`; `example-trainer`"


class _Computed(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="X_", frozen=True, extra="ignore")

    value: int = Field(default_factory=lambda: 5, description="Something.")


class _Described(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="Y_", frozen=True, extra="ignore")

    where: str | None = Field(default=None, description="A place | a path. Default: <here>.")


def test_a_computed_default_nobody_described_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="computed default"):
        class_rows(_Computed, {})


def test_a_variable_no_command_reads_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="read by no command"):
        class_rows(_Described, {})


def test_cells_escape_pipes_and_html_outside_code() -> None:
    [row] = [Row("Y_WHERE", "<here>", "A place | a path.", "`a|b` <x>")]
    line = markdown_table([row]).splitlines()[2]
    assert line == "| `Y_WHERE` | &lt;here&gt; | A place \\| a path. | `a\\|b` &lt;x&gt; |"


def test_describe_commands_collapses_a_whole_group() -> None:
    root = click.Group("root")
    group = click.Group("kafka")
    for name in ("start", "stop"):
        group.add_command(click.Command(name))
    root.add_command(group)
    root.add_command(click.Command("up"))
    assert describe_commands({"kafka start", "kafka stop", "up"}, root) == "`kafka …`, `up`"
    assert describe_commands({"kafka start"}, root) == "`kafka start`"
    assert describe_commands({""}, root) == "every command"


def test_a_group_that_runs_by_itself_is_named_as_a_command() -> None:
    root = click.Group("root")
    group = click.Group("console", invoke_without_command=True)
    group.add_command(click.Command("build"))
    root.add_command(group)
    assert describe_commands({"console"}, root) == "`console`"
    assert describe_commands({"console", "console build"}, root) == "`console …`"


def test_write_then_check_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{START}\n| stale |\n{END}\n\nafter\n", encoding="utf-8")
    assert main(["--check", str(readme)]) == 1
    assert REGENERATE in capsys.readouterr().out
    assert main(["--write", str(readme)]) == 0
    assert main(["--check", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert document_table(text) == markdown_table()
    assert text.startswith("# x\n\n") and text.endswith(f"{END}\n\nafter\n")


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ConfigurationError, match="config-table:start"):
        replace_table("# no markers\n", "| t |")
