"""``rollstream bench``: one command per benchmark of the registry, and ``bench all``.

Each command is built from its :class:`~rollstream.dev.bench.spec.Bench`: options from the
benchmark's config fields, the Kafka settings where it needs a broker, then the run, the results
merged into the JSON file and RESULTS.md rendered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import tempfile
import time
import typing
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.dev.bench.registry import BENCHES
from rollstream.dev.bench.results_file import record, write_markdown
from rollstream.dev.bench.spec import Bench, Engine, Env, Option
from rollstream.dev.bench.suite import ORDER, record_run
from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import TopicNames, topic_specs
from rollstream.settings import KafkaSettings


@click.group(cls=Group, short_help="Benchmarks into a JSON file and a generated RESULTS.md.")
def bench() -> None:
    """Benchmarks; results go to a JSON file and a generated RESULTS.md."""


def _output_options(func: Any) -> Any:
    """``--json`` (results, merged with other benchmarks') and ``--markdown`` (the summary)."""
    func = click.option(
        "--markdown",
        type=click.Path(path_type=Path),
        default=Path("bench/RESULTS.md"),
        show_default=True,
    )(func)
    return click.option(
        "--json",
        "json_path",
        type=click.Path(path_type=Path),
        default=Path("bench/results.json"),
        show_default=True,
    )(func)


def _field(spec: Bench, option: Option) -> tuple[Any, Any]:
    """The type and default of a benchmark option: its config field's, or its own (extra)."""
    if option.extra:
        return option.kind, option.default
    field = next(f for f in dataclasses.fields(spec.config) if f.name == option.name)
    return typing.get_type_hints(spec.config)[option.name], field.default


def _is_list(annotation: Any, option: Option) -> bool:
    """A tuple field given as one comma-separated value (not a repeatable option)."""
    return typing.get_origin(annotation) is tuple and not option.multiple


def _click_option(spec: Bench, option: Option) -> Any:
    """The click option of one benchmark option."""
    annotation, default = _field(spec, option)
    flag = "--" + (option.flag or option.name).replace("_", "-")
    kwargs: dict[str, Any] = {"help": option.help, "show_default": default is not None}
    if annotation is bool:
        return click.option(f"{flag}/--no-{flag[2:]}", option.name, default=default, **kwargs)
    if _is_list(annotation, option):
        return click.option(flag, option.name, default=",".join(map(str, default)), **kwargs)
    kind = typing.get_args(annotation)[0] if option.multiple else annotation
    if option.choices is not None:
        param_type: Any = click.Choice(option.choices)
    elif kind is Path:
        param_type = click.Path(file_okay=False, path_type=Path)
    elif kind is int and option.low is not None:
        high = None if option.high is None else int(option.high)
        param_type = click.IntRange(int(option.low), high, min_open=option.open_low)
    elif kind is float and option.low is not None:
        param_type = click.FloatRange(option.low, option.high, min_open=option.open_low)
    else:
        param_type = kind
    return click.option(
        flag,
        option.name,
        type=param_type,
        default=() if option.multiple else default,
        multiple=option.multiple,
        **kwargs,
    )


def _values(spec: Bench, values: dict[str, Any]) -> dict[str, Any]:
    """The options' values with comma-separated lists split and checked."""
    out = dict(values)
    for option in spec.options:
        annotation, _ = _field(spec, option)
        if _is_list(annotation, option) and isinstance(out[option.name], str):
            kind = typing.get_args(annotation)[0]
            flag = "--" + (option.flag or option.name).replace("_", "-")
            try:
                items = tuple(kind(p.strip()) for p in out[option.name].split(",") if p.strip())
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint=flag) from exc
            if option.low is not None and (not items or any(i < option.low for i in items)):
                raise click.BadParameter(f"values of {option.low} or more", param_hint=flag)
            out[option.name] = items
    return out


async def _awaited(outcome: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    return await outcome


async def _delete_topics(kafka: KafkaSettings) -> None:
    """Drop a bench run's topics (best effort: a broker that is gone keeps them)."""
    with contextlib.suppress(Exception):
        async with TopicAdmin(kafka) as admin:
            await admin.delete(s.name for s in topic_specs(TopicNames(kafka.topic_prefix)))


def _command(spec: Bench) -> click.Command:
    """The click command that runs ``spec``."""

    def run(
        json_path: Path,
        markdown: Path,
        kafka: KafkaSettings | None = None,
        engine: Engine = "reference",
        **values: Any,
    ) -> None:
        given = kafka or KafkaSettings()
        values = _values(spec, values)
        extra = {o.name: values[o.name] for o in spec.options if o.extra}
        try:
            if spec.make_config is not None:
                config = spec.make_config(dict(values), engine)
            else:
                config = spec.config(**{k: v for k, v in values.items() if k not in extra})
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        env = Env(
            click.echo,
            given.model_copy(update={"topic_prefix": f"bench-{int(time.time())}"}),
            given,
            engine,
            extra,
        )

        click.echo(spec.intro(config))
        try:
            outcome = spec.run(config, env)
            result = asyncio.run(_awaited(outcome)) if inspect.isawaitable(outcome) else outcome
        finally:
            if spec.uses_broker(config):
                asyncio.run(_delete_topics(env.kafka))
        name = spec.name if engine == "reference" else f"{spec.name}-{engine}"
        write_markdown(record(json_path, name, result), markdown)
        said = f"{spec.outro(result)}; " if spec.outro is not None else ""
        click.echo(f"{said}results in {json_path}, summary in {markdown}")

    command: Any = run
    if spec.broker is not False:
        command = settings_options(KafkaSettings, "kafka")(command)
    if spec.engine is not None:
        command = click.option(
            "--engine",
            type=click.Choice(["reference", "vllm"]),
            default="reference",
            show_default=True,
            help="The upstream: the reference backend, or a real vLLM (`rollstream engine`) "
            f"{spec.engine}; results kept apart (under the bench's name with -vllm).",
        )(command)
    for option in reversed(spec.options):
        command = _click_option(spec, option)(command)
    command = _output_options(command)
    return click.command(name=spec.name, help=spec.doc)(command)


for _spec in BENCHES:
    bench.add_command(_command(_spec))


async def _broker_answers(kafka: KafkaSettings) -> bool:
    try:
        async with asyncio.timeout(15):
            async with TopicAdmin(kafka) as admin:
                await admin.list_topics()
    except Exception:  # any failure: the benchmarks that need it would fail the same way
        return False
    return True


@bench.command(name="all")
@_output_options
@click.option(
    "--skip",
    multiple=True,
    type=click.Choice(ORDER),
    help="Leave this benchmark out (repeatable).",
)
@click.pass_context
def all_benchmarks(
    ctx: click.Context, json_path: Path, markdown: Path, skip: tuple[str, ...]
) -> None:
    """Every benchmark with its default configuration, one after another, then RESULTS.md.

    Runs backend, interceptor, stream, node, wall, reconstruct, publisher, outage, state, cluster,
    pipeline, instances, scale, long-session and fidelity, each merging its results into --json;
    regenerates --markdown once at the end, with the machine description at the top. A
    benchmark that fails does not stop the others; the command then exits with 1. Needs a broker
    (`rollstream kafka start`); cluster starts brokers of its own besides.
    """
    # The group it is registered on (tests register it on a group of their own).
    group = ctx.parent.command if ctx.parent is not None else None
    commands = group.commands if isinstance(group, click.Group) else {}
    names = [name for name in ORDER if name in commands and name not in skip]
    kafka = KafkaSettings()
    if not asyncio.run(_broker_answers(kafka)):
        raise click.ClickException(
            f"no Kafka broker answers at {kafka.bootstrap_servers}: start one with "
            "`rollstream kafka start` (or set ROLLSTREAM_BOOTSTRAP_SERVERS)"
        )
    ran: list[str] = []
    failed: list[str] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "RESULTS.md"  # each benchmark's own rewrite; ours comes last
        for name in names:
            click.echo(f"== bench {name} ({len(ran) + len(failed) + 1} of {len(names)})")
            try:
                ctx.invoke(commands[name], json_path=json_path, markdown=scratch)
            except Exception as exc:  # one benchmark failing must not lose the others' runs
                failed.append(name)
                click.echo(f"bench {name} failed: {type(exc).__name__}: {exc}", err=True)
            else:
                ran.append(name)
    data = record_run(json_path, ran, failed, time.monotonic() - began)
    write_markdown(data, markdown)
    click.echo(f"ran {', '.join(ran) or 'nothing'}; results in {json_path}, summary in {markdown}")
    if failed:
        raise click.ClickException(f"failed: {', '.join(failed)}")
