"""Long agent sessions: thousands of calls whose context grows to ~100k tokens, as recorded.

Every call's prompt is the previous call's context (prompt + completion) and a tool result,
delta-encoded against that call as the interceptor writes it; its upstream request is
delta-encoded as well (the conversation grows by the answer and the tool result). The records
are built from the deltas directly, never comparing whole prompts, so a 10,000-call session
costs O(its tokens) to make. Used by ``rollstream bench reconstruct`` (the long-session part),
the reliability suite and unit tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from rollstream.schemas import (
    ApiKind,
    AvroRecord,
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
