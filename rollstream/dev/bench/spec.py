"""What a benchmark is to the ``rollstream bench`` command: its options, its run, its words.

``rollstream bench`` builds one command per :class:`Bench` (rollstream.cli.bench): options from
:class:`Option` (type and default from the config dataclass's field), the broker's settings
when the benchmark needs one, then the results merged into the JSON file and RESULTS.md
rendered. The benchmarks' specs are in :mod:`~rollstream.dev.bench.registry`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rollstream.kafka.admin import TopicAdmin
from rollstream.schemas import TopicNames, topic_specs
from rollstream.settings import KafkaSettings


@dataclass(frozen=True)
class Option:
    """A command-line option: a field of the benchmark's config, or ``extra`` for its run."""

    name: str
    help: str = ""
    #: the flag, when it is not the field's name with dashes (``--duration`` for duration_s)
    flag: str | None = None
    #: the smallest value (``open_low``: and not it)
    low: float | None = None
    open_low: bool = False
    high: float | None = None
    choices: tuple[str, ...] | None = None
    #: not a config field: the run reads it from :attr:`Env.extra` (type ``kind``, default
    #: ``default``)
    extra: bool = False
    kind: Any = str
    default: Any = None
    multiple: bool = False


Engine = Literal["reference", "vllm"]


@dataclass(frozen=True)
class Env:
    """What a benchmark's run gets besides its config."""

    say: Callable[[str], None]
    #: the broker's settings with a topic prefix of this run's own (``bench-<time>``)
    kafka: KafkaSettings
    #: the settings as given (the broker's own processes are found by them)
    given: KafkaSettings
    engine: Engine = "reference"
    extra: dict[str, Any] = field(default_factory=dict)


Run = Callable[[Any, Env], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Bench:
    """One benchmark: ``doc`` is its command's help (first line the short one)."""

    name: str
    config: type[Any]
    run: Run
    doc: str
    intro: Callable[[Any], str]
    options: tuple[Option, ...] = ()
    #: needs a running broker: the Kafka options, topics under ``bench-<time>`` deleted after
    broker: bool = False
    #: what a real vLLM serves with ``--engine vllm`` (None: no such option)
    engine: str | None = None
    #: the config from the options' values, where it is not just the fields (None: fields)
    make_config: Callable[[dict[str, Any], Engine], Any] | None = None


async def create_topics(kafka: KafkaSettings, partitions: int) -> None:
    """Create the run's topics (under its own prefix) with ``partitions`` partitions."""
    async with TopicAdmin(kafka) as admin:
        await admin.create(topic_specs(TopicNames(kafka.topic_prefix), partitions=partitions))


def rounds_option() -> Option:
    """``--rounds``, one or more."""
    return Option("rounds", low=1)


def partitions_option() -> Option:
    """``--partitions``, one or more."""
    return Option("partitions", low=1)
