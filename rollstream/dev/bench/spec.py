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


#: A benchmark's run: a coroutine, or a plain function for one that drives processes of its
#: own step by step (an interrupt then stops it where it is, and its own clean-up runs).
Run = Callable[[Any, Env], Awaitable[dict[str, Any]] | dict[str, Any]]


@dataclass(frozen=True)
class Bench:
    """One benchmark: ``doc`` is its command's help (first line the short one)."""

    name: str
    config: type[Any]
    run: Run
    doc: str
    intro: Callable[[Any], str]
    options: tuple[Option, ...] = ()
    #: needs a running broker (always, or for the configs this says): the Kafka options, and
    #: the run's topics under ``bench-<time>`` deleted after it
    broker: bool | Callable[[Any], bool] = False
    #: what a real vLLM serves with ``--engine vllm`` (None: no such option)
    engine: str | None = None
    #: the config from the options' values, where it is not just the fields (None: fields)
    make_config: Callable[[dict[str, Any], Engine], Any] | None = None
    #: what the command says of the result before where it went (a target's verdict)
    outro: Callable[[dict[str, Any]], str] | None = None

    def uses_broker(self, config: Any) -> bool:
        """Whether a run with ``config`` needs the broker."""
        return self.broker(config) if callable(self.broker) else self.broker


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
