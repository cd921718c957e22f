"""``rollstream bench fidelity``: the fidelity matrix of model families x harnesses x context modes.

For each family and context mode, the reference backend (scripted policy, the family's own
vocabulary, renderer and output format) runs behind one interceptor, both in this process; each
real harness then runs headless on one tool task through them (write hello.txt with the shell
tool, read it back, answer). The session's CallRecords are read back from Kafka and
:func:`~rollstream.processing.reconstruct.fidelity.fidelity_row` gives its figures: threads,
``prefix_merge`` segments and breaks, invariant violations, trainable tokens, exact calls and the
serve gap. A harness that fails gives a row saying so (its stderr tail kept), never an exception
that stops the matrix.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from rollstream.capture.interceptor.proxy import Interceptor
from rollstream.capture.interceptor.settings import InterceptorSettings
from rollstream.capture.publisher.client import PublisherSettings
from rollstream.dev.backend.server import Backend
from rollstream.dev.backend.settings import BackendSettings
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import ordinary_tasks
from rollstream.kafka.reading import read_session_calls
from rollstream.models.families import FAMILIES, load_family
from rollstream.models.family import Family
from rollstream.processing.reconstruct.fidelity import FidelityRow, fidelity_row
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.presets import PRESETS, HarnessContext
from rollstream.sandbox.harnesses.runner import HarnessResult, run_harness
from rollstream.schemas import CallRecord, CallStatus, TopicNames, topic_specs
from rollstream.settings import KafkaSettings, StatePaths

Progress = Callable[[str], None]
Mode = Literal["ordinary", "exact"]
MODES: tuple[Mode, ...] = ("ordinary", "exact")
MODEL = "rollstream-tiny"
TASK = "Create hello.txt with polar."
#: Write hello.txt with the shell tool, read it back, answer: a three-turn tool task.
SCENARIOS = """
scenarios:
  - name: solve
    turns:
      - text: I will create the file.
        tool_call: {tool: shell, arguments: {command: "echo polar > hello.txt"}}
      - tool_call: {tool: shell, arguments: {command: "cat hello.txt"}}
      - text: Done. hello.txt contains polar.
side_call_text: Coding session.
"""
_STDERR_TAIL = 2000
_ANSWERS = 12  # kept per run: enough to see a harness loop, small for one that loops long


@dataclass(frozen=True)
class FidelityBenchConfig:
    """What one run covers."""

    families: tuple[str, ...] = tuple(FAMILIES)
    harnesses: tuple[str, ...] = tuple(PACKAGES)
    modes: tuple[Mode, ...] = MODES
    timeout_s: float = 180.0  # per harness run; a normal run takes seconds
    read_timeout_s: float = 30.0  # for the session's records to be readable in Kafka
    # The harnesses' system prompts and tool lists are long (Claude Code's: tens of thousands
    # of tokens), so the served context is made large enough for any of them.
    max_model_len: int = 262144


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


def _write_scenarios(state_dir: Path) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    scenarios = state_dir / "scenarios.yaml"
    scenarios.write_text(SCENARIOS)
    return scenarios


def _solved(workdir: Path) -> bool:
    hello = workdir / "hello.txt"
    return hello.exists() and hello.read_text().strip() == "polar"


@asynccontextmanager
async def served(
    family_name: str,
    family: Family,
    mode: Mode,
    kafka: KafkaSettings,
    state_dir: Path,
    config: FidelityBenchConfig,
) -> AsyncIterator[Interceptor]:
    """The scripted backend serving ``family`` on a free port, an interceptor in front of it."""
    scenarios = _write_scenarios(state_dir)
    settings = BackendSettings(
        policy="scripted", scenarios=scenarios, model=MODEL, max_model_len=config.max_model_len
    )
    runner = web.AppRunner(Backend(settings, family=family).app(), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        interceptor = Interceptor(
            InterceptorSettings(
                upstream=f"http://127.0.0.1:{port}",
                port=0,
                admin_port=0,
                upstream_model=MODEL,
                context=mode,
                tokenizer=family.tokenizer.path,
                family=family_name,
            ),
            kafka,
            PublisherSettings(),
            StatePaths(state_dir=state_dir),
        )
        try:
            await interceptor.start()
        except BaseException:
            with contextlib.suppress(Exception):  # whatever had started before the failure
                await interceptor.stop()
            raise
        try:
            yield interceptor
        finally:
            await interceptor.stop()
    finally:
        await runner.cleanup()


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


async def run_one(
    interceptor: Interceptor,
    family_name: str,
    family: Family,
    harness: str,
    mode: Mode,
    kafka: KafkaSettings,
    bin_dir: Path,
    root: Path,
    config: FidelityBenchConfig,
) -> RunRow:
    """Run ``harness`` once through ``interceptor``; its row (never raises for a failed run)."""
    session = f"fidelity-{harness}-{uuid.uuid4().hex[:8]}"
    interceptor.addon.sessions.register(session, None)  # as the node does before its harness
    ctx = HarnessContext(interceptor.url, session, MODEL, TASK)
    row = RunRow(family_name, harness, mode, "error")
    started = time.monotonic()
    # Record timestamps come from the producer's clock: a margin covers any rounding.
    since = datetime.now(UTC) - timedelta(seconds=2)
    try:
        launch = PRESETS[harness].launch(ctx, bin_dir / PACKAGES[harness][1])
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
    family_name: str,
    family: Family,
    mode: Mode,
    kafka: KafkaSettings,
    bin_dir: Path,
    base: Path,
    config: FidelityBenchConfig,
    progress: Progress,
) -> list[RunRow]:
    """Every harness through one backend and interceptor (started once: the matrix stays fast)."""
    rows: list[RunRow] = []
    try:
        async with served(family_name, family, mode, kafka, base / "state", config) as proxy:
            for harness in config.harnesses:
                row = await run_one(
                    proxy,
                    family_name,
                    family,
                    harness,
                    mode,
                    kafka,
                    bin_dir,
                    base / harness,
                    config,
                )
                rows.append(row)
                progress(_progress_line(row))
    except Exception as exc:  # the backend or the interceptor of this pair failed
        rows += _failed_rows(family_name, config.harnesses[len(rows) :], mode, exc)
        progress(f"  {family_name} {mode}: failed ({type(exc).__name__}: {exc})")
    return rows


async def _run_family(
    family_name: str,
    kafka: KafkaSettings,
    bin_dir: Path,
    tmp: Path,
    config: FidelityBenchConfig,
    progress: Progress,
) -> list[RunRow]:
    try:
        family = load_family(family_name, stand_in=True)
    except Exception as exc:  # e.g. a vocabulary that cannot be fetched here
        progress(f"  {family_name}: cannot load ({exc})")
        return [
            r for m in config.modes for r in _failed_rows(family_name, config.harnesses, m, exc)
        ]
    rows: list[RunRow] = []
    for mode in config.modes:
        base = tmp / family_name / mode
        rows += await _run_pair(family_name, family, mode, kafka, bin_dir, base, config, progress)
    return rows


async def run_fidelity_bench(
    config: FidelityBenchConfig,
    kafka: KafkaSettings,
    bin_dir: Path,
    progress: Progress = print,
    work_root: Path | None = None,
) -> dict[str, Any]:
    """The matrix on topics under ``kafka.topic_prefix`` (created here); the results as data."""
    async with TopicAdmin(kafka) as admin:
        await admin.create(topic_specs(TopicNames(kafka.topic_prefix), partitions=1))
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
                rows += await _run_family(family_name, kafka, bin_dir, Path(tmp), config, progress)
    finally:
        mitmproxy_log.setLevel(level)
    return {
        "config": asdict(config),
        "task": TASK,
        "families": {
            name: {"stand_in": FAMILIES[name].stand_in}
            for name in config.families
            if name in FAMILIES
        },
        "rows": [r.to_json() for r in rows],
        "seconds": round(time.monotonic() - began, 1),
    }


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
