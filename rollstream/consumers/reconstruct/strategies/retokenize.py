"""``retokenize``: the final conversation through the chat template (ablation baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies.base import (
    MISSING_LOGPROB,
    StrategyContext,
    StrategyResult,
    usable_calls,
)
from rollstream.errors import ConfigurationError, RollstreamError
from rollstream.models.family import Family
from rollstream.schemas.blobs import decompress_json
from rollstream.schemas.calls import SessionRequests
from rollstream.schemas.packed import Logprobs, LossMask, TokenIds
from rollstream.schemas.trajectories import Segment

NOTE = (
    "retokenize re-renders the final conversation with the chat template: its token ids are "
    "not the ones the server saw and carry no logprobs (NaN); an ablation baseline, not "
    "training data (faithfulness invariant relaxed)"
)

Messages = list[dict[str, Any]]


def retokenize(calls: Sequence[ResolvedCall], context: StrategyContext) -> StrategyResult:
    """One segment: the last usable call's conversation plus its answer, rendered and encoded.

    The harness's request is translated to Chat Completions by the interceptor's adapter for
    its API, the answer's assistant message (the record's normalized response) appended, and
    the whole rendered by the served model's family (raises ConfigurationError without one).
    Assistant turns get mask 1, from just after the generation prompt to their last stop
    token (the template's glue after it was never sampled); everything else mask 0; logprobs
    NaN (missing) under mask 1, 0.0 elsewhere. Turn boundaries come from rendering growing
    prefixes of the conversation.

    ``calls_used`` is 1 (the other usable calls appear only as that call's history); a call
    whose conversation cannot be recovered gives no segment and a note.
    """
    family = context.family
    if family is None:
        raise ConfigurationError(
            "the retokenize strategy needs the served model's tokenizer (none was given)"
        )
    usable, tally = usable_calls(calls, context)
    tally.invariant_relaxed = True
    tally.notes.append(NOTE)
    if not usable:
        return StrategyResult([], tally.stats())
    call = usable[-1]
    try:
        messages, tools = conversation(call)
    except (RollstreamError, LookupError, TypeError, ValueError) as exc:
        tally.calls_used = 0
        tally.notes.append(f"cannot recover the conversation of call {call.call_id}: {exc}")
        return StrategyResult([], tally.stats())
    ids, mask, stable = render_with_mask(family, messages, tools)
    if not stable:
        tally.notes.append(
            "the chat template is not prefix-stable here: assistant turn boundaries approximate"
        )
    tally.calls_used = 1
    segment = Segment(
        input_ids=ids,
        loss_mask=mask,
        logprobs=Logprobs(
            b"".join(MISSING_LOGPROB if m else bytes(Logprobs.itemsize) for m in mask.data)
        ),
        call_ids=[call.call_id],
    )
    return StrategyResult([segment], tally.stats())


def conversation(call: ResolvedCall) -> tuple[Messages, list[dict[str, Any]] | None]:
    """The call's messages in Chat Completions form, its answer appended, and its tools."""
    record = call.record
    adapter = ADAPTER_BY_KIND.get(record.api)
    if adapter is None:
        raise ValueError(f"no adapter for API {record.api.value!r}")
    requests = call.requests or SessionRequests([record])
    harness_request = requests.harness(record.call_id)
    if harness_request is None or record.response is None:
        raise ValueError("the record keeps no harness request or no response")
    chat = adapter.to_chat(harness_request, record.model)
    answer = decompress_json(record.response)["choices"][0]["message"]
    reply: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
    # The answer's reasoning was sampled too; templates that keep the last turn's reasoning
    # render it, so dropping it would train a turn the model never wrote.
    reasoning = answer.get("reasoning_content") or answer.get("reasoning")
    if reasoning:
        reply["reasoning_content"] = reasoning
    if answer.get("tool_calls"):
        reply["tool_calls"] = answer["tool_calls"]
    messages: Messages = [*chat["messages"], reply]
    tools = chat.get("tools") or None
    return messages, tools


def render_with_mask(
    family: Family, messages: Messages, tools: list[dict[str, Any]] | None
) -> tuple[TokenIds, LossMask, bool]:
    """Token ids of the rendered conversation, its mask and whether the turn bounds are exact.

    Mask 1 covers the assistant turns. The bounds are exact when every rendered prefix of the
    conversation is a token prefix of the whole; otherwise they are approximate.
    """
    ids = TokenIds.from_list(family.render_ids(messages, tools, add_generation_prompt=False))
    mask = bytearray(len(ids))
    stable = True
    stops = family.stop_ids
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or i == 0:
            continue
        start, ok_start = _offset(ids, family.render_ids(messages[:i], tools, True))
        end, ok_end = _offset(ids, family.render_ids(messages[: i + 1], tools, False))
        stable = stable and ok_start and ok_end
        turn = ids[start:end].to_list()
        # Stop at the turn's last stop token: what the template adds after it (a newline) was
        # never sampled.
        last_stop = max((k for k, t in enumerate(turn) if t in stops), default=len(turn) - 1)
        mask[start : start + last_stop + 1] = b"\x01" * (last_stop + 1)
    return ids, LossMask(bytes(mask)), stable


def _offset(ids: TokenIds, prefix_ids: list[int]) -> tuple[int, bool]:
    """How many of ``ids`` the rendered prefix accounts for, and whether exactly."""
    prefix = TokenIds.from_list(prefix_ids)
    shared = ids.common_prefix_len(prefix)
    return shared, shared == len(prefix)
