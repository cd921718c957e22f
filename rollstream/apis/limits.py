"""The served context's limits: output limits a server refuses, and prompts over its context.

vLLM refuses an output limit above its context length ("max_tokens=32000 cannot be greater than
max_model_len=8192") and lowers any smaller one to what the prompt leaves; Claude Code asks for
32,000 tokens whatever the model, so on a short-context model every call would fail. The
interceptor lowers such a limit to the served context (:func:`clamp_output_tokens`) and the
record says so.

A prompt over the context is refused by the server in its own words; harnesses act on their
API's: Claude Code compacts on Anthropic's "prompt is too long", Codex on OpenAI's
``context_length_exceeded``. :func:`context_overflow` reads the servers' messages (vLLM's,
SGLang's, the reference backend's), and the adapters answer each API's own error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

#: The Chat Completions fields that bound a completion's length.
OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens")


def clamp_output_tokens(chat: JSON, max_model_len: int | None) -> str | None:
    """Lower ``chat``'s output limits above the served context to it; what changed, or None.

    The server then gives the answer what the prompt leaves, as it does for any limit it takes.
    """
    if max_model_len is None:
        return None
    changed = []
    for key in OUTPUT_LIMITS:
        asked = chat.get(key)
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > max_model_len:
            chat[key] = max_model_len
            changed.append(f"{key} {asked}")
    if not changed:
        return None
    return (
        f"{' and '.join(changed)} above the served context of {max_model_len} tokens: sent as "
        f"{max_model_len}"
    )


@dataclass(frozen=True)
class ContextOverflow:
    """A request the served context cannot hold: the prompt alone, or with the output asked."""

    limit: int
    prompt_tokens: int | None = None  # None: the server did not count them
    output_tokens: int | None = None  # set when the prompt fits and prompt + output does not

    @property
    def prompt_too_long(self) -> bool:
        """Whether the prompt alone is over the context (not only with the output asked)."""
        return self.output_tokens is None


_N = r"(?:at least )?"
#: The servers' messages, with named groups ``limit``, ``prompt`` and ``output``.
_OVERFLOWS = [
    # vLLM 0.2x-0.3x, counted in tokens or (before tokenizing) in characters.
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens\. However, your prompt contains "
        rf"{_N}(?P<prompt>\d+) input tokens"
    ),
    re.compile(r"maximum context length is (?P<limit>\d+) tokens\. However, your prompt contains"),
    # Older vLLM and the OpenAI API: prompt and output together.
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens\. However, you requested \d+ tokens "
        r"\((?P<prompt>\d+) in the (?:messages|prompt), (?P<output>\d+) (?:in|for) the completion"
    ),
    # vLLM's entrypoints after rendering.
    re.compile(
        r"Input length \((?P<prompt>\d+)\) exceeds model's maximum context length "
        r"\((?P<limit>\d+)\)"
    ),
    # SGLang.
    re.compile(
        r"The input \((?P<prompt>\d+) tokens\) is longer than the model's context length "
        r"\((?P<limit>\d+) tokens\)"
    ),
]


def context_overflow(message: str) -> ContextOverflow | None:
    """What a server's error message says about the context, if it is an overflow."""
    for pattern in _OVERFLOWS:
        found = pattern.search(message)
        if found is None:
            continue
        groups = found.groupdict()
        limit = int(groups["limit"])
        prompt = int(groups["prompt"]) if groups.get("prompt") else None
        output = int(groups["output"]) if groups.get("output") else None
        if prompt is not None and output is not None and prompt >= limit:
            output = None  # the prompt alone is too long
        return ContextOverflow(limit, prompt, output)
    return None


def anthropic_overflow_message(overflow: ContextOverflow) -> str:
    """Anthropic's words for an overflow, which Claude Code reads (and compacts on)."""
    if not overflow.prompt_too_long:
        return (
            f"input length and `max_tokens` exceed context limit: {overflow.prompt_tokens} + "
            f"{overflow.output_tokens} > {overflow.limit}, decrease input length or "
            "`max_tokens` and try again"
        )
    if overflow.prompt_tokens is None:
        return f"prompt is too long: more than {overflow.limit} tokens, the served context"
    return f"prompt is too long: {overflow.prompt_tokens} tokens > {overflow.limit} maximum"


def gemini_overflow_message(overflow: ContextOverflow) -> str:
    """Google's words for an overflow."""
    counted = overflow.prompt_tokens
    if counted is not None and overflow.output_tokens is not None:
        counted += overflow.output_tokens
    count = f" ({counted})" if counted is not None else ""
    return (
        f"The input token count{count} exceeds the maximum number of tokens allowed "
        f"({overflow.limit})."
    )


#: OpenAI's error code for an overflow (Chat Completions and Responses); Codex reads it.
OPENAI_OVERFLOW_CODE = "context_length_exceeded"
