"""Synthetic sessions: the records a multi-turn tool-using harness session would produce.

Used by ``rollstream smoke`` (and later by benchmarks) to exercise the whole record path,
delta-encoded prompts included, without an inference server.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from rollstream.schemas import (
    ApiKind,
    AvroRecord,
    CallRecord,
    CallTimings,
    Logprobs,
    SessionEnded,
    SessionStarted,
    SessionStatus,
    TokenIds,
    compress_json,
    encode_prompt,
    utcnow,
)


@dataclass(frozen=True)
class SyntheticShape:
    """The size of a synthetic session."""

    turns: int = 5
    system_tokens: int = 256
    tool_result_tokens: int = 64
    completion_tokens: int = 32
    vocab_size: int = 32_000


@dataclass(frozen=True)
class SyntheticSession:
    """The records of one session and, for checking, each call's full prompt."""

    records: list[AvroRecord]
    prompts: dict[str, TokenIds]

    @property
    def calls(self) -> list[CallRecord]:
        """The session's CallRecords in order."""
        return [r for r in self.records if isinstance(r, CallRecord)]


def synthetic_session(
    session_id: str,
    shape: SyntheticShape = SyntheticShape(),
    *,
    task_id: str = "smoke-task",
    group_id: str = "smoke-group",
    seed: int = 0,
) -> SyntheticSession:
    """SessionStarted, ``turns`` calls whose prompts extend the previous context, SessionEnded."""
    rng = random.Random(seed)

    def tokens(n: int) -> TokenIds:
        return TokenIds.from_list(rng.randrange(shape.vocab_size) for _ in range(n))

    start = utcnow()
    records: list[AvroRecord] = [
        SessionStarted(
            session_id=session_id,
            task_id=task_id,
            group_id=group_id,
            harness="synthetic",
            started_at=start,
        )
    ]
    prompts: dict[str, TokenIds] = {}
    contexts: list[tuple[str, TokenIds]] = []
    prompt = tokens(shape.system_tokens)
    for turn in range(shape.turns):
        call_id = f"{session_id}-call-{turn}"
        completion = tokens(shape.completion_tokens)
        last = turn == shape.turns - 1
        began = start + timedelta(seconds=turn)
        records.append(
            CallRecord(
                call_id=call_id,
                session_id=session_id,
                seq=turn,
                api=ApiKind.CHAT_COMPLETIONS,
                model="synthetic",
                stream=True,
                harness_request=compress_json({"turn": turn, "messages": 2 * turn + 1}),
                prompt=encode_prompt(prompt, contexts[-1:]),
                completion_token_ids=completion,
                completion_logprobs=Logprobs.from_list(
                    -rng.random() * 3 for _ in range(len(completion))
                ),
                finish_reason="stop" if last else "tool_calls",
                timings=CallTimings(
                    started_at=began,
                    first_token_at=began + timedelta(milliseconds=50),
                    ended_at=began + timedelta(milliseconds=400),
                ),
            )
        )
        prompts[call_id] = prompt
        contexts.append((call_id, prompt + completion))
        # The next prompt: everything so far, then a tool result.
        prompt = prompt + completion + tokens(shape.tool_result_tokens)
    records.append(
        SessionEnded(
            session_id=session_id,
            task_id=task_id,
            group_id=group_id,
            harness="synthetic",
            status=SessionStatus.COMPLETED,
            exit_code=0,
            call_count=shape.turns,
            ended_at=start + timedelta(seconds=shape.turns),
        )
    )
    return SyntheticSession(records, prompts)
