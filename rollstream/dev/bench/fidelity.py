"""``rollstream bench fidelity``: the fidelity matrix of model families x harnesses x context modes.

For each family and context mode, an interceptor goes in front of an upstream serving the family
(:mod:`~rollstream.dev.bench.fidelity_serving`: the reference backend, or a real vLLM); each real
harness runs headless on one tool task through it. The session's CallRecords are read back from
Kafka and :func:`~rollstream.consumers.reconstruct.fidelity.fidelity_row` gives its figures. A
harness that fails gives a row saying so (its stderr tail kept), never an exception that stops
the matrix. :func:`fidelity_section` is the "Model families" section of RESULTS.md.
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
from typing import Any, cast

from rollstream.consumers.reconstruct.fidelity import FidelityRow, fidelity_row
from rollstream.dev.bench.fidelity_serving import (
    MODEL,
    MODES,
    OPTIONS_OF,
    UPSTREAMS,
    FidelityBenchConfig,
    Mode,
    Upstream,
    executable_of,
    served,
    task_of,
)
from rollstream.dev.bench.runner import table
from rollstream.dev.engine.families import ENGINE_FAMILIES
from rollstream.interceptor.proxy import Interceptor
from rollstream.kafka.admin import TopicAdmin
from rollstream.kafka.clients import ordinary_tasks
from rollstream.kafka.reading import read_session_calls
from rollstream.models.families import FAMILIES, load_family
from rollstream.models.family import Family
from rollstream.sandbox.harnesses.launch import HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS
from rollstream.sandbox.harnesses.runner import run_harness
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


async def session_records(
    interceptor: Interceptor, kafka: KafkaSettings, session: str, since: datetime, timeout_s: float
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


async def _run_one(
    run: _Run, proxy: Interceptor, family: str, loaded: Family, harness: str, mode: Mode, root: Path
) -> RunRow:
    """Run ``harness`` once through ``proxy``; its row (never raises for a failed run)."""
    session = f"fidelity-{harness}-{uuid.uuid4().hex[:8]}"
    proxy.addon.sessions.register(session, None)  # as the node does before its harness
    task = task_of(run.config.engine, harness)
    ctx = HarnessContext(proxy.url, session, MODEL, task, OPTIONS_OF.get(harness, {}))
    row = RunRow(family, harness, mode, "error")
    started = time.monotonic()
    # Record timestamps come from the producer's clock: a margin covers any rounding.
    since = datetime.now(UTC) - timedelta(seconds=2)
    try:
        launch = PRESETS[harness].launch(ctx, executable_of(harness, run.bin_dir))
        workdir = root / "work"
        result = await run_harness(
            launch, root / "home", workdir, root / "logs", run.config.timeout_s
        )
        hello = workdir / "hello.txt"
        row.seconds = round(result.duration_s, 1)
        row.exit_code = result.exit_code
        row.solved = hello.exists() and hello.read_text().strip() == "polar"
        if result.timed_out:
            row.outcome = "timeout"
        elif result.exit_code != 0:
            row.outcome = f"exit {result.exit_code}"
        else:
            row.outcome = "ok" if row.solved else "unsolved"
        if row.outcome != "ok":
            row.stderr_tail = (result.stderr_tail or result.stdout_tail)[-_STDERR_TAIL:]
        records = await session_records(proxy, run.kafka, session, since, run.config.read_timeout_s)
        row.answers = [_answer(r) for r in records[:_ANSWERS]]
        recorded = proxy.addon.ledger.calls(session)
        if len(records) < recorded:
            row.error = f"only {len(records)} of {recorded} recorded calls readable in Kafka"
        # A failed call has no answer nor tokens to train on: the figures are the others'.
        answered = [r for r in records if r.status is CallStatus.OK and r.has_tokens]
        row.failed_calls = len(records) - len(answered)
        row.fidelity = fidelity_row(family, harness, mode, answered, loaded)
    except Exception as exc:  # one failed run must not stop the matrix
        row.error = f"{type(exc).__name__}: {exc}"
        row.seconds = round(time.monotonic() - started, 1)
    if mode == "exact" and proxy.addon.exact.context is None:
        row.exact_refused = proxy.addon.exact.unavailable
    f = row.fidelity
    figures = f"{f.calls} calls, {f.segments} segments" if f is not None else "no figures"
    if row.failed_calls:
        figures += f", {row.failed_calls} failed calls"
    extra = f" ({row.error})" if row.error else ""
    run.progress(
        f"  {family} {harness} {mode}: {row.outcome} in {row.seconds:.1f} s, {figures}{extra}"
    )
    return row


async def _run_family(run: _Run, family: str, tmp: Path) -> list[RunRow]:
    """The family's rows in every mode, through one upstream (a vLLM starts once per family).

    One interceptor per mode serves every harness (started once: the matrix stays fast).
    """
    config = run.config
    rows: list[RunRow] = []

    def failed(exc: Exception, modes: tuple[Mode, ...] = config.modes) -> list[RunRow]:
        """Rows saying ``exc`` for the cells of ``modes`` not run yet."""
        done = {(r.harness, r.mode) for r in rows}
        error = f"{type(exc).__name__}: {exc}"
        return [
            RunRow(family, harness, mode, "error", error=error)
            for mode in modes
            for harness in config.harnesses
            if (harness, mode) not in done
        ]

    try:
        loaded = load_family(family, stand_in=True)
    except Exception as exc:  # e.g. a vocabulary that cannot be fetched here
        run.progress(f"  {family}: cannot load ({exc})")
        return failed(exc)
    try:
        async with run.upstream(family, loaded, tmp / family / "upstream", config) as at:
            for mode in config.modes:
                base = tmp / family / mode
                try:
                    async with served(family, loaded, mode, run.kafka, base / "state", at) as proxy:
                        for harness in config.harnesses:
                            root = base / harness
                            rows.append(
                                await _run_one(run, proxy, family, loaded, harness, mode, root)
                            )
                except Exception as exc:  # the interceptor of this pair failed
                    run.progress(f"  {family} {mode}: failed ({type(exc).__name__}: {exc})")
                    rows += failed(exc, (mode,))
    except Exception as exc:  # the upstream did not start (or stop): the cells it did not run
        run.progress(f"  {family}: upstream failed ({type(exc).__name__}: {exc})")
        rows += failed(exc)
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
            for family in config.families:
                rows += await _run_family(run, family, Path(tmp))
    finally:
        mitmproxy_log.setLevel(level)
    # What each family's rows rest on: a stand-in vocabulary; on vLLM, an architecture that
    # leaves something uncovered ("" for nothing of the kind).
    families = {n: {"stand_in": FAMILIES[n].stand_in} for n in config.families if n in FAMILIES}
    for name, about in families.items():
        if config.engine == "vllm" and name in ENGINE_FAMILIES:
            about["not_covered"] = ENGINE_FAMILIES[name].not_covered
    return {
        "config": asdict(config),
        "engine": config.engine,
        "task": task_of(config.engine),
        "families": families,
        "rows": [r.to_json() for r in rows],
        "seconds": round(time.monotonic() - began, 1),
    }


def parse_modes(value: str) -> tuple[Mode, ...]:
    """Comma-separated context modes (ordinary, exact); ValueError naming unknown ones."""
    return cast("tuple[Mode, ...]", parse_names(value, MODES, "context modes"))


def parse_names(value: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    """Comma-separated names (empty or "all": every known one); ValueError naming unknown ones."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names or names == ("all",):
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def _cells(row: dict[str, Any]) -> list[Any]:
    """One table row's cells; the figures are "-" when no records could be read."""
    outcome = str(row["outcome"])
    failed = row.get("failed_calls", 0)
    if failed:
        outcome += f", {failed} failed call{'s' if failed > 1 else ''}"
    # A harness that ran, then a bench failure (reading its records): both are said.
    if row.get("error") and row["outcome"] != "error":
        outcome += ", bench error"
    head = [row["family"], row["harness"], row["mode"], outcome]
    if "calls" not in row:
        return [*head, *["-"] * 8]
    breaks = ", ".join(f"{reason} {n}" for reason, n in sorted(row["breaks"].items())) or "0"
    exact, gap_tokens = row.get("exact_calls", 0), row.get("gap_tokens", 0)
    gap = f"{row['gap_calls']} / {gap_tokens} ({gap_tokens / exact:.0f})" if exact else "-"
    figures = (row["calls"], row["threads"], row["segments"], breaks, row["violations"])
    return [*head, *figures, f"{row['trainable_tokens']:,}", row["exact_calls"], gap]


def _summary(rows: list[dict[str, Any]]) -> list[str]:
    """The lines under the table: runs solved, violations, exact mode's segments, failures."""
    solved = [r for r in rows if r["outcome"] == "ok"]
    measured = [r for r in rows if "calls" in r]
    violations = sum(r["violations"] for r in measured)
    exact = [r for r in solved if r["mode"] == "exact" and "calls" in r]
    one_each = [r for r in exact if r["segments"] == r["threads"]]
    lines = [
        f"- Harness runs that completed the scripted task: {len(solved)} of {len(rows)}.",
        f"- Invariant violations (strict `prefix_merge`): {violations} over {len(measured)} "
        "sessions.",
        f"- Exact mode, one segment per conversation thread: {len(one_each)} of {len(exact)} "
        "successful sessions.",
    ]
    failed = [r for r in rows if r["outcome"] != "ok" or r.get("error")]
    if failed:
        named = ", ".join(f"{r['family']}/{r['harness']}/{r['mode']}" for r in failed)
        lines.append(f"- Failed (stderr tails in `bench/results.json`): {named}.")
    refused = {r["family"]: r["exact_refused"] for r in rows if r.get("exact_refused")}
    lines += [
        f"- {name}: exact context refused by the interceptor's upstream check (its calls went "
        f"as messages): {why.removeprefix('exact context refused: ')[:400]}"
        for name, why in refused.items()
    ]
    return lines


_SERVED_BY = {
    "reference": (
        "## Model families (`rollstream bench fidelity`)",
        "the reference backend's scripted policy serving the family (its vocabulary, chat "
        "renderer and output format: reasoning, tool-call syntax); one backend and interceptor "
        "per family and mode",
    ),
    "vllm": (
        "## Model families on vLLM (`rollstream bench fidelity --engine vllm`)",
        "a real vLLM (`rollstream engine`, the CPU build) serving the family's tiny "
        "random-weight model on its real vocabulary and published chat template, with vLLM's "
        "own tool-call and reasoning parsers, the plan played by a logits processor; one "
        "server per family, one interceptor per family and mode",
    ),
}


def fidelity_section(result: dict[str, Any]) -> list[str]:
    """The section's lines: how it was run, one row per (family, harness, mode), a summary."""
    config, rows = result["config"], result["rows"]
    heading, served_by = _SERVED_BY[result.get("engine", "reference")]
    lines = [
        heading,
        "",
        f'Each real harness, headless, on the task "{result["task"]}" through an interceptor '
        f"in front of {served_by}, in both context modes. The scripted model writes the file "
        "with the shell tool, reads it back and answers. The session's CallRecords are read "
        "back from Kafka. Outcome: ok (exit 0 and hello.txt holds polar), exit code, timeout "
        f"({config['timeout_s']:g} s), unsolved or error, and the calls that failed (answered "
        "with an error; the figures count the others). Threads: conversation threads among "
        "the calls; segments, breaks, violations and trainable tokens: strict `prefix_merge` "
        "and its checker; exact calls: calls sent upstream as tokens (exact mode); gap: exact "
        "calls whose prompt differs from the family's full re-render of the same conversation "
        "/ tokens after the first difference (mean per exact call).",
        "",
        *table(
            [
                *("family", "harness", "mode", "outcome", "calls", "threads", "segments"),
                *("breaks", "violations", "trainable tokens", "exact calls"),
                "gap calls / tokens (mean)",
            ],
            "llllrrrlrrrl",
            map(_cells, rows),
        ),
        "",
        *_summary(rows),
        "",
    ]
    families = result.get("families", {})
    stand_ins = {name: f["stand_in"] for name, f in families.items() if f.get("stand_in")}
    if stand_ins:
        named = "; ".join(f"{name} ({why})" for name, why in stand_ins.items())
        lines.append(
            f"Stand-in vocabularies (the Qwen3 BPE plus the family's special tokens): {named}. "
            "The other families ran on their real vocabularies."
        )
    else:
        lines.append("Every family ran on its real vocabulary.")
    uncovered = {name: f["not_covered"] for name, f in families.items() if f.get("not_covered")}
    if uncovered:
        named = "; ".join(f"{name}: {why}" for name, why in uncovered.items())
        lines.append(f"On the nearest architecture the CPU build runs: {named}.")
    return [*lines, f"The matrix took {result['seconds'] / 60:.1f} min.", ""]
