"""The generation loop: a policy's samples, paced by the latency model, cut by stop rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from rollstream.dev.backend.policies.base import Generation, GenerationRequest, Sample
from rollstream.models.tokenizer import ChatTokenizer


@dataclass(frozen=True)
class Latency:
    """Time to first token (a fixed part plus a per-prompt-token prefill) and time per token."""

    ttft_ms: float = 0.0
    prefill_us_per_token: float = 0.0
    tpot_ms: float = 0.0

    def first_token_s(self, prompt_tokens: int) -> float:
        """Seconds before the first token of a prompt of ``prompt_tokens``."""
        return self.ttft_ms / 1000 + self.prefill_us_per_token * prompt_tokens / 1e6


@dataclass(frozen=True)
class Step:
    """One step of a generation: a sampled token (None for a final text flush) and new text."""

    sample: Sample | None
    text: str


@dataclass
class Outcome:
    """How a generation ended, filled in as it runs."""

    finish_reason: str | None = None
    stop_reason: str | None = None
    token_ids: list[int] = field(default_factory=list)
    text: str = ""


async def generate(
    tokenizer: ChatTokenizer,
    generation: Generation,
    request: GenerationRequest,
    latency: Latency,
    stop: list[str],
    outcome: Outcome,
    stop_ids: frozenset[int] | None = None,
) -> AsyncIterator[Step]:
    """Yield each sampled token until a stop token, a stop string or ``max_tokens``.

    Every sampled token is yielded, the end-of-turn token and the tokens that completed a stop
    string included: token ids are what was sampled. Text is cut before a stop string; while
    stop strings are set, the last characters a stop string could start with are held back
    until it is clear they are not one. ``stop_ids``: the served family's stop tokens (default:
    the tokenizer's). ``outcome`` holds the finish reason at the end.
    """
    stops = tokenizer.stop_ids if stop_ids is None else stop_ids
    decoder = tokenizer.incremental_decoder()
    hold = max((len(s) for s in stop), default=1) - 1
    full = ""  # all text decoded so far
    emitted = 0  # how much of it has been yielded

    def release(upto: int) -> str:
        nonlocal emitted
        upto = max(upto, emitted)
        piece, emitted = full[emitted:upto], upto
        return piece

    await asyncio.sleep(latency.first_token_s(len(request.prompt_ids)))
    for index in range(request.max_tokens):
        if index:
            # sleep(0) still yields, so one fast stream cannot starve the others.
            await asyncio.sleep(latency.tpot_ms / 1000)
        sample = generation.next_token()
        outcome.token_ids.append(sample.token_id)
        if sample.token_id in stops and not request.ignore_eos:
            full += decoder.flush()
            outcome.finish_reason = "stop"
            outcome.text = full
            yield Step(sample, release(len(full)))
            return
        search_from = max(0, len(full) - hold)
        full += decoder.push(sample.token_id)
        if stop:
            hits = [(i, s) for s in stop if (i := full.find(s, search_from)) >= 0]
            if hits:
                position, matched = min(hits)
                full = full[:position]
                outcome.finish_reason, outcome.stop_reason = "stop", matched
                outcome.text = full
                yield Step(sample, release(position))
                return
        yield Step(sample, release(len(full) - hold))
    full += decoder.flush()
    outcome.finish_reason = "length"
    outcome.text = full
    tail = release(len(full))
    if tail:
        yield Step(None, tail)
