"""The set-up ``bench pipeline`` and ``bench instances`` share.

Both feed the reconstructor copies of a few synthetic sessions, run ``rollstream reconstruct``
and ``rollstream score`` as subprocesses with the same options, each service in a group of its
own per run, and report the reconstructor's input the same way. Their configs keep their own
(flat) fields, which the results record as they are; :class:`ServicesConfig` names those read
here.
"""

from __future__ import annotations

from typing import Any, Protocol

from rollstream.dev.bench.load import renamed
from rollstream.dev.synthetic import SyntheticShape, synthetic_session
from rollstream.schemas import AvroSerializer
from rollstream.settings import KafkaSettings


class ServicesConfig(Protocol):
    """The fields of a bench config that size the reconstructor's input and tune the services."""

    @property
    def sessions(self) -> int:
        """Sessions fed to the reconstructor."""

    @property
    def pool(self) -> int:
        """Distinct sessions drawn; the others are copies of them under ids of their own."""

    @property
    def calls(self) -> int:
        """Calls per session."""

    @property
    def system_tokens(self) -> int:
        """Tokens of the system prompt (the first prompt's size)."""

    @property
    def tool_result_tokens(self) -> int:
        """Tokens of each tool result a prompt grows by."""

    @property
    def completion_tokens(self) -> int:
        """Tokens of each completion a prompt grows by."""

    @property
    def strategy(self) -> str:
        """The reconstructor's ``--strategy``."""

    @property
    def evaluator(self) -> str:
        """The scorer's ``--default-evaluator``."""

    @property
    def reconstructor_batch_records(self) -> int:
        """The reconstructor's ``--max-batch-records`` (one transaction per batch)."""

    @property
    def scorer_batch_records(self) -> int:
        """The scorer's ``--max-batch-records``."""


def input_shape(config: ServicesConfig) -> SyntheticShape:
    """The shape of the reconstructor's input sessions."""
    return SyntheticShape(
        turns=config.calls,
        system_tokens=config.system_tokens,
        tool_result_tokens=config.tool_result_tokens,
        completion_tokens=config.completion_tokens,
    )


def input_summary(config: ServicesConfig) -> dict[str, Any]:
    """The reconstructor's input as the results state it: sessions, calls, the last prompt."""
    return {
        "sessions": config.sessions,
        "calls": config.sessions * config.calls,
        "prompt_tokens_last": config.system_tokens
        + (config.calls - 1) * (config.completion_tokens + config.tool_result_tokens),
    }


def session_load(
    prefix: str, count: int, pool: int, shape: SyntheticShape
) -> list[tuple[str, list[bytes]]]:
    """``count`` sessions (copies of ``pool`` drawn ones), each as its id and encoded records."""
    serializer = AvroSerializer()
    drawn = [synthetic_session(f"{prefix}-pool-{i}", shape, seed=i) for i in range(pool)]
    out = []
    for n in range(count):
        sid = f"{prefix}-{n}"
        records = renamed(drawn[n % pool].records, f"{prefix}-pool-{n % pool}", sid)
        out.append((sid, [serializer.encode(r) for r in records]))
    return out


def bench_group(kafka: KafkaSettings, service: str) -> str:
    """The consumer group of ``service`` in this run.

    A run's topic prefix is its own, so the group is too: a group also names the service's
    transactional ids, which another run's must not fence.
    """
    return f"{kafka.topic_prefix}-bench-{service}"


def reconstruct_args(config: ServicesConfig, group: str) -> list[str]:
    """``rollstream reconstruct``'s command line in group ``group``."""
    return [
        *("reconstruct", "--strategy", config.strategy, "--group", group),
        *("--max-batch-records", str(config.reconstructor_batch_records)),
    ]


def score_args(config: ServicesConfig, group: str, *extra: str) -> list[str]:
    """``rollstream score``'s command line in group ``group``, ``extra`` options added."""
    return [
        *("score", "--group-id", group, *extra),
        *("--default-evaluator", config.evaluator),
        *("--max-batch-records", str(config.scorer_batch_records)),
    ]
