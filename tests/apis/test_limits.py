"""Output limits lowered to the served context; servers' overflow messages read and re-said."""

from __future__ import annotations

from typing import Any

import pytest

from rollstream.apis.adapters import ADAPTER_BY_KIND
from rollstream.apis.limits import ContextOverflow, clamp_output_tokens, context_overflow
from rollstream.schemas import ApiKind


@pytest.mark.parametrize(
    ("body", "after", "note"),
    [
        ({"max_tokens": 32000}, {"max_tokens": 8192}, "max_tokens 32000"),
        ({"max_completion_tokens": 9000}, {"max_completion_tokens": 8192}, "max_completion"),
        ({"max_tokens": 8192}, {"max_tokens": 8192}, None),
        ({"max_tokens": 100}, {"max_tokens": 100}, None),
        ({}, {}, None),
        ({"max_tokens": None}, {"max_tokens": None}, None),
        ({"max_tokens": True}, {"max_tokens": True}, None),
    ],
)
def test_an_output_limit_above_the_context_is_lowered_to_it(
    body: dict[str, Any], after: dict[str, Any], note: str | None
) -> None:
    said = clamp_output_tokens(body, 8192)
    assert body == after
    if note is None:
        assert said is None
    else:
        assert said is not None and note in said and "served context of 8192" in said


def test_an_unknown_context_changes_nothing() -> None:
    body = {"max_tokens": 10**9}
    assert clamp_output_tokens(body, None) is None and body == {"max_tokens": 10**9}


# The servers' own messages (vLLM 0.32's renderers/params.py and serve/utils/api_utils.py,
# older vLLM's serving_engine.py, SGLang's tokenizer manager), written as they print them.
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "This model's maximum context length is 8192 tokens. However, your prompt contains "
            "9000 input tokens, which exceeds this limit even without any output tokens. Please "
            "reduce the length of the input prompt.",
            ContextOverflow(8192, 9000),
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your prompt contains "
            "at least 8193 input tokens, which exceeds this limit even without any output "
            "tokens. Please reduce the length of the input prompt.",
            ContextOverflow(8192, 8193),
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your prompt contains "
            "400000 characters (more than 98304 characters, which is the upper bound for 8192 "
            "input tokens). Please reduce the length of the input prompt.",
            ContextOverflow(8192, None),
        ),
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (3000 in the messages, 2000 in the completion). Please reduce the length "
            "of the messages or completion.",
            ContextOverflow(4096, 3000, 2000),
        ),
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4500 in the messages, 500 in the completion).",
            ContextOverflow(4096, 4500),
        ),
        (
            "Input length (9000) exceeds model's maximum context length (8192).",
            ContextOverflow(8192, 9000),
        ),
        (
            "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
            ContextOverflow(8192, 9000),
        ),
        ("max_tokens=32000 cannot be greater than max_model_len=8192.", None),
        ("The model `x` does not exist.", None),
    ],
)
def test_servers_overflow_messages_are_read(message: str, expected: ContextOverflow | None) -> None:
    assert context_overflow(message) == expected


VLLM_OVERFLOW = (
    "This model's maximum context length is 8192 tokens. However, your prompt contains 9000 "
    "input tokens, which exceeds this limit even without any output tokens."
)


def test_each_api_says_an_overflow_in_its_own_words() -> None:
    anthropic = ADAPTER_BY_KIND[ApiKind.ANTHROPIC_MESSAGES].error(400, VLLM_OVERFLOW)
    assert anthropic == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 9000 tokens > 8192 maximum",
        },
    }
    for kind in (ApiKind.CHAT_COMPLETIONS, ApiKind.RESPONSES):
        error = ADAPTER_BY_KIND[kind].error(400, VLLM_OVERFLOW)["error"]
        assert error["code"] == "context_length_exceeded" and error["message"] == VLLM_OVERFLOW
        assert error["type"] == "invalid_request_error"
    gemini = ADAPTER_BY_KIND[ApiKind.GEMINI].error(400, VLLM_OVERFLOW)["error"]
    assert gemini == {
        "code": 400,
        "message": "The input token count (9000) exceeds the maximum number of tokens allowed "
        "(8192).",
        "status": "INVALID_ARGUMENT",
    }


def test_prompt_and_output_over_the_context_is_anthropics_max_tokens_error() -> None:
    # Claude Code lowers max_tokens and retries on this one, rather than compacting.
    message = (
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
        "(3000 in the messages, 2000 in the completion)."
    )
    error = ADAPTER_BY_KIND[ApiKind.ANTHROPIC_MESSAGES].error(400, message)["error"]
    assert error["message"].startswith(
        "input length and `max_tokens` exceed context limit: 3000 + 2000 > 4096"
    )


def test_other_errors_keep_their_message() -> None:
    message = "max_tokens=32000 cannot be greater than max_model_len=8192."
    error = ADAPTER_BY_KIND[ApiKind.ANTHROPIC_MESSAGES].error(400, message)["error"]
    assert error["message"] == message
    assert (
        ADAPTER_BY_KIND[ApiKind.CHAT_COMPLETIONS].error(500, VLLM_OVERFLOW)["error"]["code"] == 500
    )
