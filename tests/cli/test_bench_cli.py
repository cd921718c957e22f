"""``rollstream bench``'s commands are built from the registry: options, config, results."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from rollstream.cli.bench import _command, bench
from rollstream.dev.bench.registry import BENCHES
from rollstream.dev.bench.spec import Bench, Engine, Env, Option


@dataclass(frozen=True)
class _Config:
    levels: tuple[int, ...] = (1, 2)
    duration_s: float = 2.5
    check: bool = True
    mode: str = "a"
    repeat: tuple[int, ...] = ()


def _spec(seen: list[tuple[Any, Env]], **kwargs: Any) -> Bench:
    async def run(config: Any, env: Env) -> dict[str, Any]:
        seen.append((config, env))
        env.say("measuring")
        return {"config": dataclasses.asdict(config)}

    options = (
        Option("levels", "Levels.", low=1),
        Option("duration_s", "Seconds.", "duration", 0, open_low=True),
        Option("check", "Check."),
        Option("mode", choices=("a", "b")),
        Option("repeat", low=2, multiple=True),
        Option("note", extra=True, default="none"),
    )
    return Bench("fake", _Config, run, "A fake.\n\nMore.", lambda c: f"fake {c.mode}", options)


def _invoke(spec: Bench, tmp_path: Path, *args: str) -> click.testing.Result:
    return CliRunner().invoke(
        _command(spec),
        ["--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "R.md"), *args],
    )


def test_no_options_give_the_config_defaults(tmp_path: Path) -> None:
    seen: list[tuple[Any, Env]] = []
    result = _invoke(_spec(seen), tmp_path)
    assert result.exit_code == 0, result.output
    ((config, env),) = seen
    assert config == _Config()
    assert env.extra == {"note": "none"}
    assert env.kafka.topic_prefix.startswith("bench-") and env.engine == "reference"
    assert result.output.splitlines()[:2] == ["fake a", "measuring"]
    recorded = json.loads((tmp_path / "r.json").read_text())["benchmarks"]["fake"]
    assert recorded["config"]["levels"] == [1, 2]


def test_options_reach_the_config(tmp_path: Path) -> None:
    seen: list[tuple[Any, Env]] = []
    args = ["--levels", "3, 4,5", "--duration", "0.5", "--no-check", "--mode", "b"]
    result = _invoke(_spec(seen), tmp_path, *args, "--repeat", "2", "--repeat", "7")
    assert result.exit_code == 0, result.output
    assert seen[0][0] == _Config((3, 4, 5), 0.5, False, "b", (2, 7))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--levels", "1,x"], "--levels"),
        (["--levels", "0"], "1 or more"),
        (["--duration", "0"], "--duration"),
        (["--mode", "c"], "--mode"),
        (["--repeat", "1"], "--repeat"),
    ],
)
def test_bad_values_are_refused_before_running(
    tmp_path: Path, args: list[str], message: str
) -> None:
    seen: list[tuple[Any, Env]] = []
    result = _invoke(_spec(seen), tmp_path, *args)
    assert result.exit_code == 2 and message in result.output
    assert seen == [] and not (tmp_path / "r.json").exists()


def test_a_config_that_refuses_its_values_is_a_usage_error(tmp_path: Path) -> None:
    def refuse(values: dict[str, Any], engine: Engine) -> Any:
        raise ValueError("unknown families x")

    spec = dataclasses.replace(_spec([]), make_config=refuse)
    result = _invoke(spec, tmp_path)
    assert result.exit_code == 2 and "unknown families x" in result.output


@pytest.mark.parametrize("spec", BENCHES, ids=lambda spec: spec.name)
def test_every_benchmark_has_its_command_with_the_config_defaults(spec: Bench) -> None:
    command = bench.commands[spec.name]
    assert command.help == spec.doc
    params = {p.name: p for p in command.params}
    if spec.make_config is not None:
        return  # its options are not all fields (covered by its benchmark's own test)
    defaults = {f.name: f.default for f in dataclasses.fields(spec.config)}
    for option in spec.options:
        default = params[option.name].default
        if isinstance(defaults[option.name], tuple) and not option.multiple:
            default = tuple(int(n) for n in str(default).split(",") if n)
        assert default == (defaults[option.name] if not option.multiple else ())


def test_an_empty_list_where_values_are_needed_is_refused(tmp_path: Path) -> None:
    seen: list[tuple[Any, Env]] = []
    result = _invoke(_spec(seen), tmp_path, "--levels", ",")
    assert result.exit_code == 2 and "1 or more" in result.output and seen == []


def test_a_plain_function_runs_and_its_verdict_is_said(tmp_path: Path) -> None:
    def run(config: Any, env: Env) -> dict[str, Any]:
        return {"config": dataclasses.asdict(config), "met": False}

    spec = dataclasses.replace(
        _spec([]), run=run, outro=lambda r: f"target {'met' if r['met'] else 'MISSED'}"
    )
    result = _invoke(spec, tmp_path)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("target MISSED; results in ")


def test_the_run_s_topics_go_when_its_config_used_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted: list[str] = []

    async def delete(kafka: Any) -> None:
        deleted.append(kafka.topic_prefix)

    monkeypatch.setattr("rollstream.cli.bench._delete_topics", delete)
    seen: list[tuple[Any, Env]] = []
    spec = dataclasses.replace(_spec(seen), broker=lambda config: config.check)
    assert _invoke(spec, tmp_path, "--no-check").exit_code == 0
    assert deleted == []  # that run never touched the broker
    assert _invoke(spec, tmp_path, "--bootstrap-servers", "127.0.0.1:1").exit_code == 0
    assert deleted == [seen[-1][1].kafka.topic_prefix]
    assert deleted[0].startswith("bench-") and seen[-1][1].given.topic_prefix == "rollstream"
