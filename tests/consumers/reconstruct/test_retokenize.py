"""retokenize with the shipped tokenizer on recorded Chat Completions and Anthropic calls."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from rollstream.consumers.reconstruct.calls import resolve_calls
from rollstream.consumers.reconstruct.checker import check_segments
from rollstream.consumers.reconstruct.strategies import StrategyContext, retokenize
from rollstream.errors import ConfigurationError
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import (
    ApiKind,
    CallRecord,
    CallTimings,
    Logprobs,
    PromptTokens,
    TokenIds,
    compress_json,
)

SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Create hello.txt"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "touch hello.txt"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": ""},
]
ANSWER = "Created hello.txt."


def record(
    tokenizer: ChatTokenizer,
    api: ApiKind = ApiKind.CHAT_COMPLETIONS,
    request: dict[str, Any] | None = None,
    call_id: str = "c-1",
    seq: int = 0,
) -> CallRecord:
    prompt = tokenizer.encode(tokenizer.render(MESSAGES, [SHELL_TOOL]))
    completion = tokenizer.encode(ANSWER + "<|im_end|>")
    response = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
                "finish_reason": "stop",
            }
        ]
    }
    return CallRecord(
        call_id=call_id,
        session_id="s",
        seq=seq,
        api=api,
        model="tiny",
        harness_request=compress_json(
            request or {"model": "gpt-x", "messages": MESSAGES, "tools": [SHELL_TOOL]}
        ),
        response=compress_json(response),
        prompt=PromptTokens(suffix=TokenIds.from_list(prompt)),
        completion_token_ids=TokenIds.from_list(completion),
        completion_logprobs=Logprobs.from_list([-0.25] * len(completion)),
        finish_reason="stop",
        timings=CallTimings(started_at=datetime(2026, 1, 1, tzinfo=UTC)),
    )


def masked_text(tokenizer: ChatTokenizer, ids: list[int], mask: list[int]) -> list[str]:
    """The decoded runs of mask-1 tokens."""
    runs: list[list[int]] = []
    for k, (token, bit) in enumerate(zip(ids, mask, strict=True)):
        if bit:
            if k == 0 or not mask[k - 1]:
                runs.append([])
            runs[-1].append(token)
    return [tokenizer.decode(run, skip_special_tokens=False) for run in runs]


def test_renders_the_final_conversation_with_assistant_turns_masked(
    tokenizer: ChatTokenizer,
) -> None:
    # An earlier call (here: the same request answered differently), then the final one.
    earlier = tokenizer.encode("Sure.<|im_end|>")
    first = record(tokenizer, call_id="c-0", seq=0).model_copy(
        update={
            "completion_token_ids": TokenIds.from_list(earlier),
            "completion_logprobs": Logprobs.from_list([-1.0] * len(earlier)),
        }
    )
    last = record(tokenizer, call_id="c-1", seq=1)
    result = retokenize(resolve_calls([first, last]), StrategyContext(tokenizer, 2))
    (segment,) = result.segments
    reply = {"role": "assistant", "content": ANSWER}
    whole = tokenizer.render([*MESSAGES, reply], [SHELL_TOOL], add_generation_prompt=False)
    assert segment.input_ids.to_list() == tokenizer.encode(whole)
    assert segment.call_ids == ["c-1"] and segment.parent is None
    turns = masked_text(tokenizer, segment.input_ids.to_list(), segment.loss_mask.to_list())
    assert turns[0].startswith("<tool_call>") and turns[0].endswith("</tool_call><|im_end|>")
    assert turns[1:] == [ANSWER + "<|im_end|>"]  # the template's newline after it is not masked
    # No logprobs: missing (NaN) where sampled, 0.0 on context.
    for value, mask in zip(segment.logprobs.to_list(), segment.loss_mask.to_list(), strict=True):
        assert math.isnan(value) if mask else value == 0.0
    stats = result.stats
    assert stats.invariant_relaxed and stats.calls == 2 and stats.calls_used == 1
    assert stats.calls_reported == 2
    assert any("retokenize re-renders" in note for note in stats.notes)


def test_the_checker_sees_what_retokenize_gives_up(tokenizer: ChatTokenizer) -> None:
    calls = resolve_calls([record(tokenizer)])
    segments = retokenize(calls, StrategyContext(tokenizer)).segments
    found = {v.kind for v in check_segments(segments, {c.call_id: c for c in calls})}
    # Same template, so the ids match here; the logprobs are gone and the earlier assistant
    # turn is trained although no call in the segment sampled it.
    assert found == {"logprob_mismatch", "mask_not_sampled"}


def test_anthropic_requests_go_through_the_adapter(tokenizer: ChatTokenizer) -> None:
    request = {
        "model": "claude-x",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Say hi"}],
    }
    calls = resolve_calls([record(tokenizer, ApiKind.ANTHROPIC_MESSAGES, request)])
    (segment,) = retokenize(calls, StrategyContext(tokenizer)).segments
    text = tokenizer.decode(segment.input_ids.to_list(), skip_special_tokens=False)
    assert "Be brief." in text and "Say hi" in text and text.endswith(ANSWER + "<|im_end|>\n")


def test_needs_a_tokenizer(tokenizer: ChatTokenizer) -> None:
    with pytest.raises(ConfigurationError, match="needs the served model's tokenizer"):
        retokenize(resolve_calls([record(tokenizer)]), StrategyContext())


def test_unrecoverable_conversation_is_a_note(tokenizer: ChatTokenizer) -> None:
    bare = record(tokenizer).model_copy(update={"response": None})
    result = retokenize(resolve_calls([bare]), StrategyContext(tokenizer))
    assert result.segments == [] and result.stats.calls_used == 0
    assert any("cannot recover the conversation of call c-1" in n for n in result.stats.notes)
    empty = retokenize([], StrategyContext(tokenizer))
    assert empty.segments == [] and empty.stats.calls == 0


def test_a_renderer_family_retokenizes_with_its_own_renderer() -> None:
    from rollstream.consumers.reconstruct.strategies.retokenize import render_with_mask
    from rollstream.models.families import load_family

    family = load_family("qwen3")
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Create hello.txt."},
        {"role": "assistant", "content": "Done.", "reasoning_content": "One echo."},
    ]
    ids, mask, stable = render_with_mask(family, messages, None)
    assert ids.to_list() == family.render_ids(messages, None, add_generation_prompt=False)
    assert stable
    trained = [t for t, m in zip(ids.to_list(), mask.data, strict=True) if m]
    text = family.tokenizer.decode(trained, skip_special_tokens=False)
    # The assistant turn as sampled, up to its end of turn; nothing of the user's turn.
    assert text.endswith("Done.<|im_end|>") and "One echo." in text
    assert "Create hello.txt." not in text


def test_the_answers_reasoning_is_rendered_and_trained() -> None:
    from rollstream.models.families import load_family

    family = load_family("qwen3")
    answer = {"role": "assistant", "content": ANSWER, "reasoning_content": "touch made it."}
    completion = family.completion_ids(MESSAGES, answer, [SHELL_TOOL])
    final = CallRecord(
        call_id="c-1",
        session_id="s",
        seq=0,
        api=ApiKind.CHAT_COMPLETIONS,
        model="tiny",
        harness_request=compress_json({"model": "q", "messages": MESSAGES, "tools": [SHELL_TOOL]}),
        response=compress_json(
            {"choices": [{"index": 0, "message": answer, "finish_reason": "stop"}]}
        ),
        prompt=PromptTokens(suffix=TokenIds.from_list(family.render_ids(MESSAGES, [SHELL_TOOL]))),
        completion_token_ids=TokenIds.from_list(completion),
        completion_logprobs=Logprobs.from_list([-0.25] * len(completion)),
        finish_reason="stop",
        timings=CallTimings(started_at=datetime(2026, 1, 1, tzinfo=UTC)),
    )
    (segment,) = retokenize(resolve_calls([final]), StrategyContext(family)).segments
    ids, mask = segment.input_ids.to_list(), segment.loss_mask.to_list()
    # The final turn as the model sampled it: its reasoning, then its answer.
    assert masked_text(family.tokenizer, ids, mask)[-1] == family.tokenizer.decode(
        completion, skip_special_tokens=False
    )
