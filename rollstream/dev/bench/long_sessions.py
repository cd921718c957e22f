"""Long agent sessions: thousands of calls whose context grows to ~100k tokens, as recorded.

Every call's prompt is the previous call's context (prompt + completion) and a tool result,
delta-encoded against that call as the interceptor writes it; its upstream request is
delta-encoded as well (the conversation grows by the answer and the tool result). The records
are built from the deltas directly, never comparing whole prompts, so a 10,000-call session
costs O(its tokens) to make. Used by the reliability suite, unit tests and ``rollstream bench
reconstruct``, whose long-session part is here too (:func:`measure_long_sessions`): one session
of each size, timed in-process as the throughput part (:func:`reconstruct_once`).
Reconstruction is linear when the time per call stays flat while the calls grow 100-fold (the
mean context is about the same at every size); the build peak is measured with tracemalloc in a
separate untimed run.
"""

from __future__ import annotations

import math
import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import numpy as np

from rollstream.consumers.reconstruct.buffers import PartitionBuffers, build_trajectory
from rollstream.consumers.reconstruct.strategies import Strategy, get_strategy
from rollstream.dev.bench.common import status_kb
from rollstream.dev.bench.runner import table
from rollstream.schemas import (
    ApiKind,
    AvroRecord,
    AvroSerializer,
    CallRecord,
    CallTimings,
    Logprobs,
    PromptTokens,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    TokenIds,
    compress_json,
    utcnow,
)
from rollstream.schemas.requests import RequestBase
from rollstream.schemas.trajectories import Trajectory

#: What reconstructing a session takes, timed apart.
PHASES = ("decode", "buffer", "build", "encode")
_TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]


@dataclass(frozen=True)
class LongShape:
    """The size of a long session: ``calls`` calls, the context growing to ``final_tokens``.

    The context starts at ``system_tokens``; each call adds a quarter of the growth as its
    completion, the rest as the tool result the next prompt carries.
    """

    calls: int
    final_tokens: int = 100_000
    system_tokens: int = 2_000
    vocab_size: int = 32_000

    @property
    def growth(self) -> int:
        """Tokens each call adds to the context."""
        return max(2, math.ceil((self.final_tokens - self.system_tokens) / self.calls))

    @property
    def completion_tokens(self) -> int:
        """Tokens each call samples."""
        return max(1, self.growth // 4)

    @property
    def tool_result_tokens(self) -> int:
        """Tokens of the tool result the next prompt adds after a completion."""
        return self.growth - self.completion_tokens

    @property
    def last_context_tokens(self) -> int:
        """The last call's prompt plus completion: the session's one segment."""
        return self.system_tokens + self.calls * self.growth - self.tool_result_tokens


@dataclass
class LongSession:
    """The records of one long session, made on the fly; ``context`` is filled as they are."""

    session_id: str
    shape: LongShape
    seed: int = 0
    task_id: str = "long-task"
    group_id: str = "long-group"
    #: The last call's prompt + completion, packed (complete once :meth:`records` is exhausted).
    context: bytes = b""

    def records(self) -> Iterator[AvroRecord]:
        """SessionStarted, the calls in order, SessionEnded."""
        rng = np.random.default_rng(self.seed)
        shape = self.shape
        start = utcnow()
        yield SessionStarted(
            session_id=self.session_id,
            task_id=self.task_id,
            group_id=self.group_id,
            harness="synthetic-long",
            started_at=start,
        )
        context = bytearray()
        previous: str | None = None
        for turn in range(shape.calls):
            call_id = f"{self.session_id}-call-{turn}"
            suffix = self._tokens(
                rng, shape.system_tokens if turn == 0 else shape.tool_result_tokens
            )
            completion = self._tokens(rng, shape.completion_tokens)
            prompt = (
                PromptTokens(suffix=TokenIds(suffix))
                if previous is None
                else PromptTokens(
                    base_call_id=previous, shared_len=len(context) // 4, suffix=TokenIds(suffix)
                )
            )
            context += suffix
            context += completion
            yield self._call(call_id, turn, previous, prompt, completion, rng, start)
            previous = call_id
        self.context = bytes(context)
        yield SessionEnded(
            session_id=self.session_id,
            task_id=self.task_id,
            group_id=self.group_id,
            harness="synthetic-long",
            status=SessionStatus.COMPLETED,
            exit_code=0,
            call_count=shape.calls,
            ended_at=start + timedelta(seconds=shape.calls),
        )

    def _tokens(self, rng: np.random.Generator, n: int) -> bytes:
        return rng.integers(0, self.shape.vocab_size, n, dtype="<u4").tobytes()

    def _call(
        self,
        call_id: str,
        turn: int,
        previous: str | None,
        prompt: PromptTokens,
        completion: bytes,
        rng: np.random.Generator,
        start: datetime,
    ) -> CallRecord:
        n = len(completion) // 4
        logprobs = (-3.0 * rng.random(n, dtype=np.float32)).astype("<f4").tobytes()
        if previous is None:
            request = {
                "model": "synthetic",
                "tools": _TOOLS,
                "messages": [
                    {"role": "system", "content": "You are an agent."},
                    {"role": "user", "content": "Fix the bug."},
                ],
            }
            base = None
        else:
            # The previous answer and its tool result: the conversation grows by two items.
            request = {
                "messages": [
                    {"role": "assistant", "content": f"step {turn - 1}"},
                    {"role": "tool", "content": f"output {turn - 1}"},
                ]
            }
            base = RequestBase(
                base_call_id=previous,
                list_key="messages",
                shared_items=2 * turn,
                unchanged=["model", "tools"],
            )
        last = turn == self.shape.calls - 1
        began = start + timedelta(seconds=turn)
        return CallRecord(
            call_id=call_id,
            session_id=self.session_id,
            seq=turn,
            api=ApiKind.CHAT_COMPLETIONS,
            model="synthetic",
            stream=True,
            upstream_request=compress_json(request),
            upstream_request_base=base,
            response=compress_json(
                {"choices": [{"message": {"role": "assistant", "content": f"step {turn}"}}]}
            ),
            prompt=prompt,
            completion_token_ids=TokenIds(completion),
            completion_logprobs=Logprobs(logprobs),
            finish_reason="stop" if last else "tool_calls",
            timings=CallTimings(
                started_at=began,
                first_token_at=began + timedelta(milliseconds=50),
                ended_at=began + timedelta(milliseconds=400),
            ),
        )


def reconstruct_once(
    values: list[bytes],
    serializer: AvroSerializer,
    strategy: Strategy,
    name: str,
    buffers: PartitionBuffers,
    offset: int = 0,
    trace: bool = False,
) -> tuple[dict[str, float], list[Trajectory], int]:
    """Decode one session's records, buffer them, build and encode what is ready.

    Returns the seconds of each phase, the trajectories and (``trace``) the most bytes
    ``build_trajectory`` allocated at once.
    """
    began = time.perf_counter()
    records: list[AvroRecord] = [serializer.decode(v) for v in values]
    decoded = time.perf_counter()
    for i, record in enumerate(records):
        buffers.add(offset + i, record, decoded)
    ready = buffers.ready(decoded, 10.0, 3600.0)
    phases = {"decode": decoded - began, "buffer": time.perf_counter() - decoded}
    phases |= {"build": 0.0, "encode": 0.0}
    trajectories, peak = [], 0
    for buffer, status in ready:
        start = time.perf_counter()
        if trace:
            tracemalloc.start()
        try:
            trajectory = build_trajectory(buffer, status, strategy, name)
            peak = max(peak, tracemalloc.get_traced_memory()[1]) if trace else 0
        finally:
            if trace:
                tracemalloc.stop()
        built = time.perf_counter()
        serializer.encode(trajectory)
        phases["encode"] += time.perf_counter() - built
        phases["build"] += built - start
        buffers.mark_emitted(buffer.session_id)
        trajectories.append(trajectory)
    return phases, trajectories, peak


def _total(run: tuple[dict[str, float], Any, Any]) -> float:
    return sum(run[0].values())


def measure_long_sessions(
    sizes: tuple[int, ...],
    final_tokens: int,
    system_tokens: int,
    rounds: int,
    strategy: str,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Per-call reconstruction cost and peak memory for one session of each size."""
    rows = []
    serializer = AvroSerializer()
    for calls in sizes:
        shape = LongShape(calls=calls, final_tokens=final_tokens, system_tokens=system_tokens)
        session = LongSession(f"long-{calls}", shape, seed=calls)
        values = [serializer.encode(r) for r in session.records()]
        once = partial(reconstruct_once, values, serializer, get_strategy(strategy), strategy)
        runs = sorted((once(PartitionBuffers(0)) for _ in range(rounds)), key=_total)
        phases, (trajectory,), _ = runs[len(runs) // 2]
        peak = once(PartitionBuffers(0), trace=True)[2]
        totals = [_total(r) for r in runs]
        row = {
            "calls": calls,
            "context_tokens_last": shape.last_context_tokens,
            "tokens_per_call": shape.growth,
            "record_bytes": sum(len(v) for v in values),
            "ms_per_call": round(sum(phases.values()) / calls * 1000, 4),
            "ms_per_call_range": [round(t / calls * 1000, 4) for t in (totals[0], totals[-1])],
            "ms_per_call_phases": {k: round(v / calls * 1000, 4) for k, v in phases.items()},
            "session_s": round(sum(phases.values()), 3),
            "build_peak_mb": round(peak / 1e6, 1),
            "process_peak_rss_mb": round(status_kb()["VmHWM"] / 1024, 1),
            "segments": len(trajectory.segments),
            "status": trajectory.status.value,
        }
        progress(
            f"  {calls} calls (context to {shape.last_context_tokens:,} tokens): "
            f"{row['ms_per_call']} ms/call ({row['ms_per_call_phases']}), build peak "
            f"{row['build_peak_mb']} MB (RSS peak {row['process_peak_rss_mb']} MB), "
            f"{row['segments']} segment(s), {row['status']}"
        )
        rows.append(row)
    return {
        "strategy": strategy,
        "rounds": rounds,
        "sessions": rows,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        # A shared machine's numbers say little without how busy it was.
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def long_sessions_section(long: dict[str, Any] | None) -> list[str]:
    """The long-session part of the reconstruction section of RESULTS.md."""
    if not long:
        return ["Long sessions: not run.", ""]
    rows = long["sessions"]
    header = ["calls", "context tokens (last)", "ms/call"]
    header += ["ms/call: decode / buffer / build / encode", "session s", "build peak MB"]
    header += ["RSS peak MB", "segments", "status"]
    cells = [
        (
            f"{r['calls']:,}",
            f"{r['context_tokens_last']:,}",
            "{} ({} to {})".format(r["ms_per_call"], *r["ms_per_call_range"]),
            " / ".join(str(r["ms_per_call_phases"][phase]) for phase in PHASES),
            r["session_s"],
            r["build_peak_mb"],
            r.get("process_peak_rss_mb", "-"),
            r["segments"],
            r["status"],
        )
        for r in rows
    ]
    first, last = rows[0], rows[-1]
    ratio = last["ms_per_call"] / first["ms_per_call"] if first["ms_per_call"] else float("nan")
    return [
        "Long sessions, in-process without Kafka: one session of each size, its context "
        f"growing to ~{rows[-1]['context_tokens_last']:,} tokens, prompts and upstream "
        "requests delta-encoded against the previous call as the interceptor writes them "
        f"(`{long['strategy']}`). Timed as above: decode, PartitionBuffers, build_trajectory "
        "(prompt and request chains resolved, the strategy, the conversation), encode; median "
        f"of {long['rounds']} rounds (range in brackets). Build peak: what build_trajectory "
        "allocates at most above the decoded records (tracemalloc, separate run); RSS peak: "
        "the process's high-water mark after that size (records included, sizes in order). "
        f"Measured {long.get('date', '?')}, load average "
        f"{long.get('load_average_1min', '?')} at the end.",
        "",
        *table(header, "rrrlrrrrl", cells),
        "",
        f"- Target time per call flat as sessions grow ({first['calls']:,} to "
        f"{last['calls']:,} calls: at most 2x): {'met' if ratio <= 2.0 else 'MISSED'} "
        f"({ratio:.2f}x).",
        "",
    ]
