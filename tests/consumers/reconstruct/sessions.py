"""Realistic sessions over a toy chat template on token ids, for the strategy tests.

The template is ChatML-like: a message renders as ``IM_START role NL content IM_END NL`` and a
prompt ends with the generation prompt ``IM_START ASSISTANT NL``. A sampled completion is the
assistant's content followed by ``EOS`` (= ``IM_END``), so a faithful re-rendering of the turn
makes ``prompt + completion`` a prefix of the next prompt. Events perturb that the way real
harnesses do: drift, side calls, sub-agents, compaction, truncation, failures, retries.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hypothesis import strategies as st

from rollstream.consumers.reconstruct.calls import ResolvedCall, resolve_calls
from rollstream.schemas import (
    ApiKind,
    CallError,
    CallRecord,
    CallStatus,
    CallTimings,
    Logprobs,
    TokenIds,
    encode_prompt,
)

IM_START, IM_END, NL, SYSTEM, USER, ASSISTANT, TOOL, CALL_OPEN, CALL_CLOSE, THINK = range(1, 11)
EOS = IM_END
T0 = datetime(2026, 1, 1, tzinfo=UTC)

Message = tuple[int, tuple[int, ...]]

# Events that keep the main thread one prefix-extending sequence.
LINEAR_EVENTS = (
    "turn",
    "parallel",
    "failed",
    "cancelled",
    "retry_identical",
    "no_tokens",
    "no_logprobs",
    "truncated_closed",
)
BRANCHING_EVENTS = ("drift", "side", "subagent", "compaction", "truncated_cut", "resample")
ALL_EVENTS = LINEAR_EVENTS + BRANCHING_EVENTS


def render(messages: Sequence[Message], generation_prompt: bool = True) -> list[int]:
    """The toy template."""
    out: list[int] = []
    for role, content in messages:
        out += [IM_START, role, NL, *content, IM_END, NL]
    if generation_prompt:
        out += [IM_START, ASSISTANT, NL]
    return out


@dataclass
class PlannedCall:
    """One call as the harness made it (before delta encoding)."""

    call_id: str
    prompt: list[int] | None
    completion: list[int] | None
    logprobs: list[float] | None
    finish: str | None
    status: CallStatus = CallStatus.OK


@dataclass
class Planted:
    """What the generator put in, for the statistics to be checked against."""

    events: list[str] = field(default_factory=list)
    failed: int = 0
    without_tokens: int = 0
    duplicates: int = 0
    redelivered: int = 0
    #: The calls that wrote a summary the history was then replaced with.
    summaries: list[str] = field(default_factory=list)


@dataclass
class GeneratedSession:
    """A session's planned calls, the records the interceptor would have written, the plan."""

    planned: list[PlannedCall]
    records: list[CallRecord]
    planted: Planted

    def resolved(self) -> list[ResolvedCall]:
        """The records through resolve_calls."""
        return resolve_calls(self.records)

    @property
    def used_ids(self) -> list[str]:
        """Call ids every token strategy must place (ok, with tokens, not a duplicate)."""
        seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        out = []
        for call in self.planned:
            if call.status is not CallStatus.OK or call.prompt is None or call.completion is None:
                continue
            key = (tuple(call.prompt), tuple(call.completion))
            if key not in seen:
                seen.add(key)
                out.append(call.call_id)
        return out


class SessionWriter:
    """Builds one session event by event; the main conversation is a list mutated in place."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.planned: list[PlannedCall] = []
        self.planted = Planted()
        self.system = self.text(3, 8)

    def text(self, lo: int, hi: int) -> tuple[int, ...]:
        """Ordinary content tokens (ids 100 and up never collide with the template's)."""
        return tuple(self.rng.randrange(100, 5000) for _ in range(self.rng.randint(lo, hi)))

    def tool_call(self) -> tuple[int, ...]:
        """One tool-call block as the model writes it."""
        return (CALL_OPEN, *self.text(2, 6), CALL_CLOSE)

    def call(
        self,
        conv: list[Message],
        content: tuple[int, ...],
        finish: str,
        *,
        rendered: tuple[int, ...] | None = None,
        status: CallStatus = CallStatus.OK,
        tokens: bool = True,
        logprobs: bool = True,
        answer: bool = True,
    ) -> PlannedCall:
        """One call on ``conv``; with ``answer`` its assistant turn joins the conversation."""
        completion = [*content, EOS] if finish in ("stop", "tool_calls") else list(content)
        planned = PlannedCall(
            call_id=f"call-{len(self.planned):04d}",
            prompt=render(conv) if tokens else None,
            completion=completion if tokens else None,
            logprobs=[-self.rng.random() * 4 for _ in completion] if tokens and logprobs else None,
            finish=finish,
            status=status,
        )
        self.planned.append(planned)
        if answer:
            conv.append((ASSISTANT, content if rendered is None else rendered))
        return planned

    def tool_turn(
        self, conv: list[Message], calls: int = 1, tokens: bool = True, logprobs: bool = True
    ) -> None:
        """The model calls ``calls`` tools at once; their results follow."""
        content = tuple(token for _ in range(calls) for token in self.tool_call())
        self.call(conv, content, "tool_calls", tokens=tokens, logprobs=logprobs)
        for _ in range(calls):
            conv.append((TOOL, self.text(1, 12)))

    # Events -----------------------------------------------------------------------------

    def turn(self, conv: list[Message]) -> None:
        self.tool_turn(conv)

    def parallel(self, conv: list[Message]) -> None:
        self.tool_turn(conv, calls=self.rng.randint(2, 3))

    def drift(self, conv: list[Message]) -> None:
        block = self.tool_call()
        if self.rng.random() < 0.5:  # reasoning stripped from the history (Qwen3-style)
            content = (THINK, *self.text(1, 4), THINK, *block)
            rendered = block
        else:  # arguments re-serialized: one token differs
            content = block
            i = self.rng.randrange(len(block))
            rendered = (*block[:i], block[i] + 7919, *block[i + 1 :])
        self.call(conv, content, "tool_calls", rendered=rendered)
        conv.append((TOOL, self.text(1, 12)))

    def side(self, conv: list[Message]) -> None:
        system = self.system if self.rng.random() < 0.5 else self.text(2, 5)
        side: list[Message] = [(SYSTEM, system), (USER, self.text(2, 6))]
        for _ in range(self.rng.randint(1, 2)):
            self.call(side, self.text(1, 4), "stop")
            side.append((USER, self.text(1, 3)))

    def subagent(self, conv: list[Message]) -> None:
        self.call(conv, self.tool_call(), "tool_calls")  # the main agent delegates
        sub: list[Message] = [(SYSTEM, self.system), (USER, self.text(2, 8))]
        for _ in range(self.rng.randint(0, 2)):
            self.tool_turn(sub)
        self.call(sub, self.text(2, 5), "stop")
        conv.append((TOOL, self.text(2, 5)))  # the sub-agent's report

    def compaction(self, conv: list[Message]) -> None:
        # Asked for a summary (an instruction of its own), which then stands for the history.
        summarize = [*conv, (USER, (42, 43, 44, *self.text(8, 12)))]
        summary = self.text(14, 24)
        self.planted.summaries.append(self.call(summarize, summary, "stop").call_id)
        conv[:] = [(SYSTEM, self.system), (USER, summary)]

    def truncated_closed(self, conv: list[Message]) -> None:
        # The harness keeps the cut-off text and the template closes the turn: still a prefix.
        self.call(conv, self.text(2, 6), "length")
        conv.append((USER, self.text(1, 3)))

    def truncated_cut(self, conv: list[Message]) -> None:
        # The harness drops the unparseable tail of a cut-off tool call.
        content = (*self.tool_call(), *self.text(2, 4))
        keep = self.rng.randrange(1, len(content))
        self.call(conv, content, "length", rendered=content[:keep])
        conv.append((USER, self.text(1, 3)))

    def failed(self, conv: list[Message]) -> None:
        self._failure(conv, CallStatus.ERROR)

    def cancelled(self, conv: list[Message]) -> None:
        self._failure(conv, CallStatus.CANCELLED)

    def _failure(self, conv: list[Message], status: CallStatus) -> None:
        partial = self.rng.random() < 0.5  # a stream that broke after some tokens
        self.call(conv, self.text(1, 3), "length", status=status, tokens=partial, answer=False)
        self.planted.failed += 1
        self.tool_turn(conv)  # the harness retries

    def retry_identical(self, conv: list[Message]) -> None:
        self.tool_turn(conv)
        first = self.planned[-1]
        self.planned.append(
            PlannedCall(
                call_id=f"call-{len(self.planned):04d}",
                prompt=first.prompt,
                completion=first.completion,
                logprobs=first.logprobs,
                finish=first.finish,
            )
        )
        self.planted.duplicates += 1

    def resample(self, conv: list[Message]) -> None:
        # The same request again (e.g. an invalid answer), answered differently.
        self.call(conv, self.tool_call(), "tool_calls", answer=False)
        self.tool_turn(conv)

    def no_tokens(self, conv: list[Message]) -> None:
        self.tool_turn(conv, tokens=False)
        self.planted.without_tokens += 1

    def no_logprobs(self, conv: list[Message]) -> None:
        self.tool_turn(conv, logprobs=False)


def build_session(
    events: Sequence[str],
    seed: int = 0,
    *,
    min_shared: int = 4,
    redeliver: Sequence[int] = (),
    shuffle: bool = False,
) -> GeneratedSession:
    """A session: a task, the ``events`` on its main conversation, then a final answer."""
    writer = SessionWriter(random.Random(seed))
    main: list[Message] = [(SYSTEM, writer.system), (USER, writer.text(3, 10))]
    for event in events:
        writer.planted.events.append(event)
        getattr(writer, event)(main)
    writer.call(main, writer.text(2, 6), "stop")
    records = to_records(writer.planned, min_shared)
    for index in redeliver:  # the spool delivers at least once
        if records:
            records.append(records[index % len(records)])
            writer.planted.redelivered += 1
    if shuffle:
        random.Random(seed + 1).shuffle(records)
    return GeneratedSession(writer.planned, records, writer.planted)


def to_records(planned: Sequence[PlannedCall], min_shared: int = 4) -> list[CallRecord]:
    """CallRecords as the interceptor writes them: prompts delta-encoded against earlier calls."""
    contexts: list[tuple[str, TokenIds]] = []
    records = []
    for seq, call in enumerate(planned):
        prompt_tokens = None
        completion = logprobs = None
        if call.prompt is not None and call.completion is not None:
            prompt = TokenIds.from_list(call.prompt)
            completion = TokenIds.from_list(call.completion)
            prompt_tokens = encode_prompt(prompt, contexts, min_shared)
            contexts.append((call.call_id, prompt + completion))
            if call.logprobs is not None:
                logprobs = Logprobs.from_list(call.logprobs)
        error = None
        if call.status is CallStatus.ERROR:
            error = CallError(type="upstream_http", message="502", http_status=502)
        elif call.status is CallStatus.CANCELLED:
            error = CallError(type="cancelled", message="harness hung up")
        records.append(
            CallRecord(
                call_id=call.call_id,
                session_id="sess-1",
                seq=seq,
                api=ApiKind.CHAT_COMPLETIONS,
                model="toy",
                prompt=prompt_tokens,
                completion_token_ids=completion,
                completion_logprobs=logprobs,
                finish_reason=call.finish,
                timings=CallTimings(started_at=T0),
                status=call.status,
                error=error,
            )
        )
    return records


@st.composite
def sessions(
    draw: st.DrawFn, events: Sequence[str] = ALL_EVENTS, max_events: int = 8
) -> GeneratedSession:
    """Hypothesis: a session of up to ``max_events`` events drawn from ``events``."""
    chosen = draw(st.lists(st.sampled_from(list(events)), max_size=max_events))
    return build_session(
        chosen,
        draw(st.integers(0, 2**32 - 1)),
        min_shared=draw(st.sampled_from([1, 4, 16, 10_000])),
        redeliver=draw(st.lists(st.integers(0, 1000), max_size=3)),
        shuffle=draw(st.booleans()),
    )
