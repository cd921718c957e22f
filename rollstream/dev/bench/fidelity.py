"""``rollstream bench fidelity``: the fidelity matrix of model families x harnesses x context modes.

For each family and context mode, an upstream serves the family behind one interceptor: the
reference backend (scripted policy, the family's own vocabulary, renderer and output format, in
this process) or, with ``--engine vllm``, a real vLLM serving the family's tiny model (vLLM's own
template, parsers and token ids; the plan played by its logits processor). Each real harness then
runs headless on one tool task through them (write hello.txt with the shell tool, read it back,
answer). The session's CallRecords are read back from Kafka and
:func:`~rollstream.consumers.reconstruct.fidelity.fidelity_row` gives its figures: threads,
``prefix_merge`` segments and breaks, invariant violations, trainable tokens, exact calls and the
serve gap. A harness that fails gives a row saying so (its stderr tail kept), never an exception
that stops the matrix.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rollstream.consumers.reconstruct.fidelity import FidelityRow, fidelity_row
from rollstream.dev.bench.fidelity_serving import (
    MODEL,
    MODES,
    UPSTREAMS,
    FidelityBenchConfig,
    Mode,
    Upstream,
    served,
    task_of,
)
from rollstream.dev.engine.families import ENGINE_FAMILIES
from rollstream.interceptor.proxy import Interceptor
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import ordinary_tasks
from rollstream.kafka.reading import read_session_calls
from rollstream.models.families import FAMILIES, load_family
from rollstream.models.family import Family
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.presets import PRESETS, HarnessContext
from rollstream.sandbox.harnesses.runner import HarnessResult, run_harness
from rollstream.schemas import CallRecord, CallStatus, TopicNames, topic_specs
from rollstream.settings import KafkaSettings

Progress = Callable[[str], None]
_STDERR_TAIL = 2000
_ANSWERS = 12  # kept per run: enough to see a harness loop, small for one that loops long


@dataclass
class RunRow:
    """One (family, harness, mode): how the harness ended and, if records came, their figures."""

    family: str
    harness: str
    mode: str
    outcome: str  # ok, exit <code>, timeout, unsolved, error
    seconds: float = 0.0
    exit_code: int | None = None
    solved: bool = False  # hello.txt holds "polar"
    failed_calls: int = 0  # records not OK or without tokens (not in the figures)
    answers: list[str] = field(default_factory=list)  # the model's first answers, in order
    error: str = ""
    stderr_tail: str = ""
    #: Exact context refused by the interceptor's upstream check (its calls then went as
    #: messages, rendered by the server), or "".
    exact_refused: str = ""
    fidelity: FidelityRow | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """Plain data: the fidelity figures flattened into the row."""
        out = {k: v for k, v in asdict(self).items() if k != "fidelity"}
        if self.fidelity is not None:
            figures = self.fidelity.to_json()
            out |= {k: v for k, v in figures.items() if k not in ("family", "harness", "mode")}
        return out


def _answer(record: CallRecord) -> str:
    """A short trace of one call's answer: its tool calls, else its text (or its error)."""
    if record.status is not CallStatus.OK:
        error = record.error
        why = f"{error.type}: {error.message}" if error is not None else ""
        return f"{record.status.value}: {why}"[:120]
    try:
        message = record.decoded_response()["choices"][0]["message"]
    except (KeyError, IndexError, TypeError, ValueError):
        return "?"
    calls = [
        f"{c['function']['name']}({c['function']['arguments']})"
        for c in message.get("tool_calls") or []
    ]
    return ("; ".join(calls) or str(message.get("content") or ""))[:120]


def _outcome(result: HarnessResult, solved: bool) -> str:
    if result.timed_out:
        return "timeout"
    if result.exit_code != 0:
        return f"exit {result.exit_code}"
    return "ok" if solved else "unsolved"


def _solved(workdir: Path) -> bool:
    hello = workdir / "hello.txt"
    return hello.exists() and hello.read_text().strip() == "polar"


async def session_records(
    interceptor: Interceptor,
    kafka: KafkaSettings,
    session: str,
    since: datetime,
    timeout_s: float,
) -> list[CallRecord]:
    """The session's CallRecords from Kafka, sorted by seq, once all it recorded are readable."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    # A harness killed on timeout may leave a call in flight; it is recorded when it ends.
    while interceptor.addon.in_flight.get(session, 0) and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    expected = interceptor.addon.ledger.calls(session)
    while True:
        # mitmproxy runs the loop with an eager task factory that aiokafka cannot start under.
        with ordinary_tasks():
            found = await read_session_calls(kafka, since=since, sessions={session})
        records = found.calls.get(session, [])
        if len(records) >= expected or loop.time() >= deadline:
            return sorted(records, key=lambda r: r.seq)
        await asyncio.sleep(0.5)


@dataclass(frozen=True)
class _Run:
    """What every cell of one matrix run shares."""

    config: FidelityBenchConfig
    kafka: KafkaSettings
    bin_dir: Path
    progress: Progress
    upstream: Upstream


async def run_one(
    run: _Run,
    interceptor: Interceptor,
    family_name: str,
    family: Family,
    harness: str,
    mode: Mode,
    root: Path,
) -> RunRow:
    """Run ``harness`` once through ``interceptor``; its row (never raises for a failed run)."""
    config, kafka = run.config, run.kafka
    session = f"fidelity-{harness}-{uuid.uuid4().hex[:8]}"
    interceptor.addon.sessions.register(session, None)  # as the node does before its harness
    ctx = HarnessContext(interceptor.url, session, MODEL, task_of(config.engine))
    row = RunRow(family_name, harness, mode, "error")
    started = time.monotonic()
    # Record timestamps come from the producer's clock: a margin covers any rounding.
    since = datetime.now(UTC) - timedelta(seconds=2)
    try:
        launch = PRESETS[harness].launch(ctx, run.bin_dir / PACKAGES[harness][1])
        workdir = root / "work"
        result = await run_harness(launch, root / "home", workdir, root / "logs", config.timeout_s)
        row.seconds = round(result.duration_s, 1)
        row.exit_code = result.exit_code
        row.solved = _solved(workdir)
        row.outcome = _outcome(result, row.solved)
        if row.outcome != "ok":
            row.stderr_tail = (result.stderr_tail or result.stdout_tail)[-_STDERR_TAIL:]
        records = await session_records(interceptor, kafka, session, since, config.read_timeout_s)
        row.answers = [_answer(r) for r in records[:_ANSWERS]]
        recorded = interceptor.addon.ledger.calls(session)
        if len(records) < recorded:
            row.error = f"only {len(records)} of {recorded} recorded calls readable in Kafka"
        # A failed call has no answer nor tokens to train on: the figures are the others'.
        answered = [r for r in records if r.status is CallStatus.OK and r.has_tokens]
        row.failed_calls = len(records) - len(answered)
        row.fidelity = fidelity_row(family_name, harness, mode, answered, family)
    except Exception as exc:  # one failed run must not stop the matrix
        row.error = f"{type(exc).__name__}: {exc}"
        row.seconds = round(time.monotonic() - started, 1)
    return row


def _failed_rows(
    family: str, harnesses: tuple[str, ...], mode: str, exc: Exception
) -> list[RunRow]:
    error = f"{type(exc).__name__}: {exc}"
    return [RunRow(family, h, mode, "error", error=error) for h in harnesses]


def _progress_line(row: RunRow) -> str:
    f = row.fidelity
    figures = f"{f.calls} calls, {f.segments} segments" if f is not None else "no figures"
    if row.failed_calls:
        figures += f", {row.failed_calls} failed calls"
    extra = f" ({row.error})" if row.error else ""
    return (
        f"  {row.family} {row.harness} {row.mode}: {row.outcome} in {row.seconds:.1f} s, "
        f"{figures}{extra}"
    )


async def _run_pair(
    run: _Run,
    family_name: str,
    family: Family,
    mode: Mode,
    upstream: tuple[str, str],
    base: Path,
) -> list[RunRow]:
    """Every harness through one interceptor (started once: the matrix stays fast)."""
    rows: list[RunRow] = []
    harnesses = run.config.harnesses
    try:
        async with served(family_name, family, mode, run.kafka, base / "state", upstream) as proxy:
            for harness in harnesses:
                row = await run_one(run, proxy, family_name, family, harness, mode, base / harness)
                exact = proxy.addon.exact
                if mode == "exact" and exact.context is None:
                    row.exact_refused = exact.unavailable
                rows.append(row)
                run.progress(_progress_line(row))
    except Exception as exc:  # the interceptor of this pair failed
        rows += _failed_rows(family_name, harnesses[len(rows) :], mode, exc)
        run.progress(f"  {family_name} {mode}: failed ({type(exc).__name__}: {exc})")
    return rows


async def _run_family(run: _Run, family_name: str, tmp: Path) -> list[RunRow]:
    """The family's rows in every mode, through one upstream (a vLLM starts once per family)."""
    config = run.config

    def failed(exc: Exception) -> list[RunRow]:
        return [
            r for m in config.modes for r in _failed_rows(family_name, config.harnesses, m, exc)
        ]

    try:
        family = load_family(family_name, stand_in=True)
    except Exception as exc:  # e.g. a vocabulary that cannot be fetched here
        run.progress(f"  {family_name}: cannot load ({exc})")
        return failed(exc)
    rows: list[RunRow] = []
    try:
        upstream = run.upstream(family_name, family, tmp / family_name / "upstream", config)
        async with upstream as served_at:
            for mode in config.modes:
                base = tmp / family_name / mode
                rows += await _run_pair(run, family_name, family, mode, served_at, base)
    except Exception as exc:  # the upstream did not start (or stop): the cells it did not run
        run.progress(f"  {family_name}: upstream failed ({type(exc).__name__}: {exc})")
        done = {(r.harness, r.mode) for r in rows}
        rows += [r for r in failed(exc) if (r.harness, r.mode) not in done]
    return rows


async def run_fidelity_bench(
    config: FidelityBenchConfig,
    kafka: KafkaSettings,
    bin_dir: Path,
    progress: Progress = print,
    work_root: Path | None = None,
    upstream: Upstream | None = None,
) -> dict[str, Any]:
    """The matrix on topics under ``kafka.topic_prefix`` (created here); the results as data.

    ``upstream`` serves each family (default: the config's engine, started here).
    """
    async with TopicAdmin(kafka) as admin:
        await admin.create(topic_specs(TopicNames(kafka.topic_prefix), partitions=1))
    run = _Run(config, kafka, bin_dir, progress, upstream or UPSTREAMS[config.engine])
    began = time.monotonic()
    rows: list[RunRow] = []
    # mitmproxy runs in this process and logs every connection at INFO: the progress lines
    # would drown in it.
    mitmproxy_log = logging.getLogger("mitmproxy")
    level = mitmproxy_log.level
    mitmproxy_log.setLevel(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory(dir=work_root, prefix="fidelity-") as tmp:
            for family_name in config.families:
                rows += await _run_family(run, family_name, Path(tmp))
    finally:
        mitmproxy_log.setLevel(level)
    return {
        "config": asdict(config),
        "engine": config.engine,
        "task": task_of(config.engine),
        "families": {name: _about(name, config) for name in config.families if name in FAMILIES},
        "rows": [r.to_json() for r in rows],
        "seconds": round(time.monotonic() - began, 1),
    }


def _about(family: str, config: FidelityBenchConfig) -> dict[str, str]:
    """What the family's rows rest on ("" for nothing of the kind).

    A stand-in vocabulary; on vLLM, an architecture that leaves something uncovered.
    """
    about = {"stand_in": FAMILIES[family].stand_in}
    if config.engine == "vllm" and family in ENGINE_FAMILIES:
        about["not_covered"] = ENGINE_FAMILIES[family].not_covered
    return about


def parse_modes(value: str) -> tuple[Mode, ...]:
    """Comma-separated context modes (ordinary, exact); ValueError naming unknown ones."""
    by_name: dict[str, Mode] = {m: m for m in MODES}
    return tuple(by_name[n] for n in parse_names(value, MODES, "context modes"))


def parse_names(value: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    """Comma-separated names (empty or "all": every known one); ValueError naming unknown ones."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names or names == ("all",):
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return names
