"""The README and the docs against the code: commands, flags, the generated tables, records.

The configuration table (docs/configuration.md) and the benchmark summary (bench/RESULTS.md) are
the generated ones; the topics and records of docs/records.md are the schemas'. Every docs/ page
and compose/README.md get the command and flag check too.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

import click
import pytest

from rollstream.cli import cli
from rollstream.cli.docs_config import REGENERATE, document_table, markdown_table
from rollstream.dev.bench.results_file import write_markdown
from rollstream.dev.bench.summary import replace_table, summary_table
from rollstream.schemas import Topic

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
AVRO = ROOT / "rollstream" / "schemas" / "avro"

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`([^`\n]+)`")
# "rollstream" as a command word: at the start, after a space, a path or a shell character.
_COMMAND = re.compile(r"(?:^|(?<=[\s/$(;&|]))rollstream[ \t]+(?=[a-z-])")
_END_OF_COMMAND = re.compile(r"&&|\|\||[;|&)]")


def strip_comment(line: str) -> str:
    """The line without a shell comment (a ``#`` after a space, outside quotes)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def code_lines(markdown: str) -> list[str]:
    """Lines of the fenced blocks (continuations joined, comments cut), then inline spans."""
    lines: list[str] = []
    for block in _FENCE.findall(markdown):
        lines += [strip_comment(line) for line in block.replace("\\\n", " ").splitlines()]
    prose = _FENCE.sub("", markdown)
    lines += _INLINE.findall(prose.replace("\n", " "))
    return lines


def command_invocations(line: str) -> list[list[str]]:
    """The words after each ``rollstream`` command word of a line, up to a shell separator."""
    out = []
    for match in _COMMAND.finditer(line):
        rest = line[match.end() :]
        end = _END_OF_COMMAND.search(rest)
        text = rest[: end.start()] if end else rest
        try:
            words = shlex.split(text)
        except ValueError:  # an unbalanced quote in prose-like text: words are enough
            words = text.split()
        out.append(words)
    return out


def _option_names(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


def problems(markdown: str, root: click.Group = cli) -> list[str]:
    """Commands and flags in the code of ``markdown`` that the CLI does not have."""
    found: list[str] = []
    for line in code_lines(markdown):
        for words in command_invocations(line):
            command: click.Command = root
            path = ["rollstream"]
            for position, word in enumerate(words):
                if word.startswith("-"):
                    flag = word.split("=", 1)[0]
                    if re.fullmatch(r"--?[a-z][a-z0-9-]*", flag) and flag not in _option_names(
                        command
                    ):
                        found.append(f"{' '.join(path)}: no option {flag} ({line.strip()})")
                    continue
                if not isinstance(command, click.Group):
                    continue  # an argument of a leaf command
                sub = command.commands.get(word)
                if sub is None:
                    if position == 0 or re.fullmatch(r"[a-z][a-z0-9-]*", word):
                        found.append(f"{' '.join(path)}: no command {word!r} ({line.strip()})")
                    break
                command = sub
                path.append(word)
    return found


def test_config_table_is_the_generated_one() -> None:
    table = document_table((DOCS / "configuration.md").read_text(encoding="utf-8"))
    assert table == markdown_table(), (
        f"docs/configuration.md's table is out of date; regenerate it with: {REGENERATE}"
    )


def test_benchmark_table_is_the_generated_one() -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert replace_table(text, summary_table(results)) == text, (
        "bench/RESULTS.md's summary differs from bench/results.json; regenerate it with: "
        "python -m rollstream.dev.bench.summary --write bench/RESULTS.md"
    )


def test_results_md_is_what_the_results_render_to() -> None:
    """bench/RESULTS.md as a whole, not only its summary: each section from its JSON."""
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    written = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        rendered = Path(tmp) / "RESULTS.md"
        write_markdown(results, rendered)
        assert rendered.read_text(encoding="utf-8") == written, (
            "bench/RESULTS.md differs from what bench/results.json renders to; regenerate it "
            "with: python -m rollstream.dev.bench.results_file"
        )


def test_every_rollstream_command_and_flag_in_the_readme_exists() -> None:
    text = README.read_text(encoding="utf-8")
    assert len([w for line in code_lines(text) for w in command_invocations(line)]) > 10
    assert problems(text) == []


@pytest.mark.parametrize(
    "doc",
    [*sorted(DOCS.glob("*.md")), ROOT / "compose" / "README.md"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_rollstream_command_and_flag_in_the_docs_exists(doc: Path) -> None:
    assert problems(doc.read_text(encoding="utf-8")) == []


def test_the_command_check_catches_unknown_commands_and_flags() -> None:
    bad = (
        "```bash\nrollstream nosuch --x\nrollstream up --detach --no-such-flag   # comment\n"
        "rollstream topics frobnicate\nrollstream kafka start \\\n    --bogus 1\n```\n"
        "and inline `rollstream tail events --follow --colour`.\n"
    )
    assert problems(bad) == [
        "rollstream: no command 'nosuch' (rollstream nosuch --x)",
        "rollstream up: no option --no-such-flag (rollstream up --detach --no-such-flag)",
        "rollstream topics: no command 'frobnicate' (rollstream topics frobnicate)",
        "rollstream kafka start: no option --bogus (rollstream kafka start      --bogus 1)",
        "rollstream tail: no option --colour (rollstream tail events --follow --colour)",
    ]
    good = (
        "```bash\n.venv/bin/rollstream up --detach --upstream http://h:8000 && rollstream status\n"
        'rollstream harness run pi "say # hi" --option command=x   # rollstream nosuch --x\n'
        "python -m rollstream.cli.docs_config --write README.md\n```\n"
        "`rollstream/schemas/avro/` and `rollstream.events` are not commands; "
        "`rollstream tail -f events` is.\n"
    )
    assert problems(good) == []


def test_every_make_target_in_the_readme_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.MULTILINE))
    for doc, needed in ((README, {"demo", "test", "check"}), (DOCS / "development.md", set())):
        code = "\n".join(code_lines(doc.read_text(encoding="utf-8")))
        named = set(re.findall(r"(?:^|(?<=\s))make ([a-z][a-z-]*)", code, re.MULTILINE))
        assert needed <= named
        assert named <= targets, (doc, named - targets)


def test_topics_table_lists_every_topic() -> None:
    section = (DOCS / "records.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `rollstream\.([a-z.A-Z]+)` \|", section, re.MULTILINE))
    assert {t.value for t in Topic} <= listed


def _fields(schema: Any, names: dict[str, Any]) -> set[str]:
    """Every field name in a schema, nested records and named references included."""
    out: set[str] = set()
    if isinstance(schema, str):
        return _fields(names[schema], names) if schema in names else out
    if isinstance(schema, list):
        for branch in schema:
            out |= _fields(branch, names)
        return out
    if not isinstance(schema, dict):
        return out
    if schema.get("type") == "record":
        for field in schema["fields"]:
            out.add(field["name"])
            out |= _fields(field["type"], names)
    for key in ("items", "values"):
        if key in schema:
            out |= _fields(schema[key], names)
    if isinstance(schema.get("type"), dict | list):
        out |= _fields(schema["type"], names)
    return out


def test_records_table_names_each_topic_record_with_real_fields() -> None:
    schemas = {p.stem: json.loads(p.read_text()) for p in AVRO.glob("rollstream.*.avsc")}
    topic_records = {
        name.removeprefix("rollstream."): schema
        for name, schema in schemas.items()
        if schema.get("type") == "record" and "Topic:" in schema.get("doc", "")
    }
    assert "CallRecord" in topic_records and "DeadLetter" in topic_records
    section = (DOCS / "records.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| ([A-Z][A-Za-z]+) \| (.+) \|$", section, re.MULTILINE))
    assert set(topic_records) <= set(rows), "a record written to a topic is missing"
    for name, row in rows.items():
        fields = _fields(topic_records[name], schemas)
        named = set(re.findall(r"`([a-z_]+)`", row))
        assert named <= fields, f"{name}: no such fields {sorted(named - fields)}"
