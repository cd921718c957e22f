"""The text around reasoning and calls, cut as vLLM 0.32's qwen3 and hermes parsers cut it.

Expected values are vLLM's own answers on the same turns (tests/models/test_parse_on_vllm.py
holds the family to a running vLLM; these pin the cases a tiny model's plan does not write).
"""

from __future__ import annotations

import pytest

from rollstream.models.renderer_text import verbatim_text

THINK = "<think>\nRead it first.\n</think>\n\n"
CALL = '<tool_call>\n{"name": "bash", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize(
    ("text", "parsed", "called", "expected"),
    [
        # Text then a call (vLLM: '\n\nI will create the file.\n', '\nThe task ...\n').
        (f"{THINK}I will look.\n{CALL}", ("I will look.", "Read it first."), True,
         ("\n\nI will look.\n", "\nRead it first.\n")),
        # A call alone: the blank before it is dropped, as vLLM drops it.
        (f"{THINK}{CALL}", (None, "Read it first."), True, (None, "\nRead it first.\n")),
        # An answer without calls keeps everything after </think>.
        (f"{THINK}Done.\n", ("Done.", "Read it first."), False,
         ("\n\nDone.\n", "\nRead it first.\n")),
        # The prompt opened the reasoning: the turn starts inside it.
        ("\nRead it first.\n</think>\n\nDone.", ("Done.", "Read it first."), False,
         ("\n\nDone.", "\nRead it first.\n")),
        # Reasoning never closed (a stream cut mid-thought): all of it is reasoning.
        ("<think>\nStill thinking ", (None, "Still thinking"), False, (None, "\nStill thinking ")),
        # An unparsed call stays content, as written after the reasoning.
        (f"{THINK}<tool_call>\n{{oops\n</tool_call>", ("<tool_call>\n{oops\n</tool_call>",
         "Read it first."), False, ("\n\n<tool_call>\n{oops\n</tool_call>", "\nRead it first.\n")),
    ],
)  # fmt: skip
def test_the_text_is_cut_as_vllm_cuts_it(
    text: str,
    parsed: tuple[str | None, str | None],
    called: bool,
    expected: tuple[str | None, str | None],
) -> None:
    assert verbatim_text(text, *parsed, called) == expected


def test_a_reading_that_is_not_the_text_with_its_whitespace_is_kept() -> None:
    """Only whitespace is restored: where the parser read something else, its reading stands."""
    text = f"{THINK}I will look.\n{CALL}"
    assert verbatim_text(text, "Something else.", "Other reasoning.", True) == (
        "Something else.",
        "Other reasoning.",
    )
