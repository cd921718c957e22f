"""A missing optional extra: ``--help`` still works, and a command says which extra to install."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rollstream.cli import SECTIONS, cli
from rollstream.cli.extras import (
    COMMAND_EXTRAS,
    EXTRA_MODULES,
    extra_for,
    missing_extra_message,
    unavailable_command,
)
from rollstream.cli.group import Group

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = frozenset().union(*EXTRA_MODULES.values())


def _invoke(root: click.Command, *args: str) -> click.testing.Result:
    return CliRunner().invoke(root, list(args), prog_name="rollstream")


def test_a_service_without_its_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mitmproxy", None)  # `import mitmproxy` now fails
    # Were the service's check gone, its import (fresh, not cached) would still fail: no proxy
    # starts serving here either way.
    monkeypatch.delitem(sys.modules, "rollstream.interceptor.proxy", raising=False)
    result = _invoke(cli, "interceptor", "--port", "0")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "Error: rollstream interceptor needs the 'interceptor' extra: "
        "pip install 'rollstream[interceptor]' (missing: mitmproxy)"
    ]


def test_a_subcommand_without_its_extra_names_its_whole_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    # Imported by other tests already; gone, it is imported again and meets the missing package.
    monkeypatch.delitem(sys.modules, "rollstream.models.vocabularies", raising=False)
    result = _invoke(cli, "models", "list")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "Error: rollstream models list needs the 'models' extra: "
        "pip install 'rollstream[models]' (missing: tokenizers)"
    ]


def _root_with(command: click.Command) -> Group:
    root, stack = Group("rollstream"), Group("stack")
    stack.add_command(command)
    root.add_command(stack)
    return root


def test_a_development_tool_asks_for_the_dev_extra_once() -> None:
    @click.command()
    def up() -> None:
        raise ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")

    result = _invoke(_root_with(up), "stack", "up")
    assert result.exit_code == 1
    assert result.output == (
        "Error: rollstream stack up needs the 'dev' extra: pip install 'rollstream[dev]' "
        "(missing: aiohttp)\n"
    )


def test_a_module_no_extra_provides_keeps_its_traceback() -> None:
    @click.command()
    def up() -> None:
        raise ModuleNotFoundError("No module named 'nosuch'", name="nosuch")

    result = _invoke(_root_with(up), "stack", "up")
    assert isinstance(result.exception, ModuleNotFoundError)


def test_the_extra_is_the_commands_own_when_it_holds_the_module() -> None:
    assert extra_for("interceptor", "mitmproxy.http") == "interceptor"
    assert extra_for("interceptor", "tokenizers") == "interceptor"  # not "models": one install
    assert extra_for("bench", "pyarrow") == "dev"
    assert extra_for("reconstruct", "pyarrow") == "export"  # not the command's: the smallest
    assert extra_for("tail", "tokenizers") == "models"  # a base command: the smallest extra
    assert extra_for("tail", "nosuch") is None
    assert missing_extra_message("rollstream", "nosuch") is None
    assert set(COMMAND_EXTRAS.values()) <= set(EXTRA_MODULES)


def test_a_command_whose_module_cannot_load_stands_in_with_the_message() -> None:
    standin = unavailable_command("report", "pyarrow")
    assert standin is not None
    root = Group("rollstream")
    root.section("Tools", standin)
    help_text = _invoke(root, "--help").output
    assert "report  (not installed: pip install 'rollstream[dev]')" in help_text
    for args in (["report"], ["report", "--help"], ["report", "--out", "x.html", "extra"]):
        result = _invoke(root, *args)
        assert result.exit_code == 1
        assert result.output == (
            "Error: rollstream report needs the 'dev' extra: pip install 'rollstream[dev]' "
            "(missing: pyarrow)\n"
        )
    assert unavailable_command("report", "nosuch") is None


_BASE_INSTALL = """
import importlib.abc, sys
OPTIONAL = set(sys.argv[1].split(","))
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
sys.argv = ["rollstream", *sys.argv[2:]]
from rollstream.cli import main
main()
"""


def _base_install(*args: str) -> subprocess.CompletedProcess[str]:
    """``rollstream ARGS`` in a fresh interpreter where no package of any extra imports."""
    return subprocess.run(
        [sys.executable, "-c", _BASE_INSTALL, ",".join(sorted(OPTIONAL)), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=os.environ | {"COLUMNS": "200"},
    )


def test_help_works_with_the_base_install_alone() -> None:
    result = _base_install("--help")
    assert result.returncode == 0, result.stderr
    for title, entries in SECTIONS:
        assert f"{title}:" in result.stdout
        for _module, _attribute, name in entries:
            assert re.search(rf"^  {re.escape(name)} ", result.stdout, re.MULTILINE), name


def test_a_service_on_the_base_install_fails_with_one_line() -> None:
    result = _base_install("interceptor")
    assert result.returncode == 1
    assert re.fullmatch(
        r"Error: rollstream interceptor needs the 'interceptor' extra: "
        r"pip install 'rollstream\[interceptor\]' \(missing: \w+\)\n",
        result.stderr,
    ), result.stderr


def _requirement_names(extra: str, table: dict[str, list[str]]) -> set[str]:
    """The import names of an extra's packages, other extras it includes resolved."""
    renamed = {"pyyaml": "yaml", "openai-harmony": "openai_harmony"}
    names: set[str] = set()
    for requirement in table[extra]:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[([a-z,]+)\])?", requirement)
        assert match is not None, requirement
        package, included = match.group(1).lower(), match.group(2)
        if package == "rollstream":
            for other in (included or "").split(","):
                names |= _requirement_names(other, table)
        else:
            names.add(renamed.get(package, package.replace("-", "_")))
    return names


def test_the_mapping_matches_pyproject_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    table: dict[str, list[str]] = project.get("optional-dependencies", {})
    if not set(EXTRA_MODULES) <= set(table):
        pytest.skip("pyproject.toml does not declare the extras yet")
    for extra, modules in EXTRA_MODULES.items():
        assert _requirement_names(extra, table) & OPTIONAL == modules, extra


def test_the_command_line_starts_without_the_clients_only_some_commands_use() -> None:
    """Every test and service start pays the CLI's imports: kafka-python (the secure broker's
    ACL step, a sixth of the start-up) is imported by the step that uses it, not by `--help`."""
    probe = "import sys, rollstream.cli; print(sorted(m for m in sys.modules if m == 'kafka'))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
