"""The ``rollstream`` command line."""

from __future__ import annotations

import logging
import os
from typing import Any

import click
from pydantic import ValidationError

from rollstream import __version__
from rollstream.errors import RollstreamError


class _Group(click.Group):
    """Turns our errors into one clear message and exit code 1, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RollstreamError as exc:
            raise click.ClickException(str(exc)) from exc
        except ValidationError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="rollstream")
@click.option(
    "--log-level",
    default=lambda: os.environ.get("ROLLSTREAM_LOG_LEVEL", "INFO"),
    show_default="INFO",
    help="Logging level. [env: ROLLSTREAM_LOG_LEVEL]",
)
def cli(log_level: str) -> None:
    """Token-faithful RL rollouts from any agent harness, streamed through Apache Kafka."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # aiokafka logs expected transient states (coordinator not yet elected) at ERROR.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, logging.getLogger().level))


def _register() -> None:
    from rollstream.cli import (
        ablate,
        backend,
        bench,
        check,
        demo,
        example,
        export,
        harness,
        interceptor,
        kafka,
        models,
        node,
        reconstruct,
        replay,
        report,
        score,
        smoke,
        stack,
        tail,
        topics,
    )

    cli.add_command(kafka.kafka)
    cli.add_command(topics.topics)
    cli.add_command(tail.tail_command)
    cli.add_command(smoke.smoke)
    cli.add_command(stack.up)
    cli.add_command(stack.status)
    cli.add_command(stack.down)
    cli.add_command(backend.backend)
    cli.add_command(bench.bench)
    cli.add_command(interceptor.interceptor)
    cli.add_command(harness.harness)
    cli.add_command(reconstruct.reconstruct)
    cli.add_command(score.score)
    cli.add_command(replay.replay)
    cli.add_command(check.check)
    cli.add_command(demo.demo_command)
    cli.add_command(example.example_trainer)
    cli.add_command(node.node)
    cli.add_command(node.run)
    cli.add_command(ablate.ablate)
    cli.add_command(export.export)
    cli.add_command(report.report)
    cli.add_command(models.models)


_register()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="rollstream")
