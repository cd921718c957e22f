"""What the ``rollstream bench`` commands share: output options and clean-up of bench topics."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import click

from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import TopicNames, topic_specs
from rollstream.settings import KafkaSettings


def output_options(func: click.decorators.FC) -> click.decorators.FC:
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


def engine_option(what: str) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """``--engine reference|vllm``: what the bench runs against; ``what`` says what vLLM serves."""
    return click.option(
        "--engine",
        type=click.Choice(["reference", "vllm"]),
        default="reference",
        show_default=True,
        help=f"The upstream: the reference backend, or a real vLLM (`rollstream engine`) {what}; "
        "results kept apart (under the bench's name with -vllm).",
    )


def results_name(bench: str, engine: str) -> str:
    """Where a bench's results go in the JSON file: apart for each engine but the reference."""
    return bench if engine == "reference" else f"{bench}-{engine}"


async def delete_topics(kafka: KafkaSettings) -> None:
    """Drop a bench run's topics (best effort: a broker that is gone keeps them)."""
    with contextlib.suppress(Exception):
        async with TopicAdmin(kafka) as admin:
            await admin.delete(s.name for s in topic_specs(TopicNames(kafka.topic_prefix)))
