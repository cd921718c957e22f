"""Delta encoding of prompt token ids within a session.

A call names an earlier call of its session and how many tokens of that call's context (prompt
followed by completion) its prompt starts with, and carries only the rest. A 50-turn session
then costs O(total tokens) on the broker instead of O(turns x context).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rollstream.errors import SerializationError
from rollstream.schemas.calls import PromptTokens
from rollstream.schemas.packed import TokenIds

# Sharing fewer tokens than this is not worth a dependency on another record.
MIN_SHARED_TOKENS = 16


def encode_prompt(
    prompt: TokenIds,
    candidates: Iterable[tuple[str, TokenIds]],
    min_shared: int = MIN_SHARED_TOKENS,
) -> PromptTokens:
    """Delta-encode ``prompt`` against the candidate (call id, context) sharing most tokens.

    Falls back to the full prompt when no candidate shares at least ``min_shared`` tokens.
    """
    best_id: str | None = None
    best_len = 0
    for call_id, context in candidates:
        shared = prompt.common_prefix_len(context)
        if shared > best_len:
            best_id, best_len = call_id, shared
    if best_id is None or best_len < min_shared:
        return PromptTokens(suffix=prompt)
    return PromptTokens(base_call_id=best_id, shared_len=best_len, suffix=prompt[best_len:])


def resolve_prompt(prompt: PromptTokens, context_of: Callable[[str], TokenIds | None]) -> TokenIds:
    """The full prompt token ids; ``context_of`` gives a base call's prompt + completion.

    Raises SerializationError (not retriable) when the base is unknown or too short: the record
    cannot be resolved by waiting.
    """
    if prompt.base_call_id is None:
        return prompt.suffix
    context = context_of(prompt.base_call_id)
    if context is None:
        raise SerializationError(f"prompt base call {prompt.base_call_id!r} is unknown")
    if len(context) < prompt.shared_len:
        raise SerializationError(
            f"prompt shares {prompt.shared_len} tokens of base call {prompt.base_call_id!r}, "
            f"which has only {len(context)}"
        )
    return context[: prompt.shared_len] + prompt.suffix
