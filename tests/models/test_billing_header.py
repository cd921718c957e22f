"""Claude Code's billing header leaves a system prompt as vLLM 0.32's chat layer drops it."""

from __future__ import annotations

from typing import Any

import pytest

from rollstream.models.tokenizer import without_billing_header

HEADER = "x-anthropic-billing-header: cc_version=2.1.197; cch=3f2a;"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (f"{HEADER}\nYou are a Claude agent.\nMore.", "You are a Claude agent.\nMore."),
        (HEADER, ""),
        (
            [{"type": "text", "text": HEADER}, {"type": "text", "text": "You are a Claude agent."}],
            [{"type": "text", "text": "You are a Claude agent."}],
        ),
        ([{"type": "text", "text": f"{HEADER}\nRest."}], [{"type": "text", "text": "Rest."}]),
        # Only a text that opens with it: a mention further in stays.
        (f"Note: {HEADER}\nkept", f"Note: {HEADER}\nkept"),
        (None, None),
    ],
)
def test_a_system_prompt_loses_the_header_line_only(content: Any, expected: Any) -> None:
    assert without_billing_header({"role": "system", "content": content}) == {
        "role": "system",
        "content": expected,
    }


def test_other_roles_keep_it() -> None:
    message = {"role": "user", "content": f"{HEADER}\nhi"}
    assert without_billing_header(message) == message
