"""Delta encoding of prompt token ids within a session.

A call names an earlier call of its session and how many tokens of that call's context (prompt
followed by completion) its prompt starts with, and carries only the rest. A 50-turn session
then costs O(total tokens) on the broker instead of O(turns x context).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rollstream.errors import SerializationError
from rollstream.schemas.calls import PromptTokens
from rollstream.schemas.packed import TokenIds

# Sharing fewer tokens than this is not worth a dependency on another record.
MIN_SHARED_TOKENS = 16

_ID = TokenIds.itemsize


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


@dataclass(frozen=True, slots=True)
class _Link:
    """One call's prompt as a step from its base: ``shared`` tokens of the base's context."""

    base: str | None
    shared: int
    suffix: bytes
    completion: bytes
    prompt_len: int

    @property
    def context_len(self) -> int:
        return self.prompt_len + len(self.completion) // _ID


class SessionPrompts:
    """The prompts of one session's calls, resolved through their delta chains on demand.

    Calls are added in order (a base before the calls that name it), which checks every chain
    at once and keeps only what the records already hold: each call's suffix and completion.
    Full prompts and contexts are built when asked for, one chain step from a recently built
    base (a bounded LRU of ``cache_size`` contexts), or by walking the chain back to a cached
    ancestor or its root and replaying it into one buffer: iterative, never recursive, and a
    10,000-call session with 100k-token contexts holds a few contexts, not every prompt.
    """

    def __init__(self, cache_size: int = 16) -> None:
        self._links: dict[str, _Link] = {}
        self._cache_size = max(1, cache_size)
        self._contexts: OrderedDict[str, bytes] = OrderedDict()
        self._prompts: OrderedDict[str, bytes] = OrderedDict()

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._links

    def add(self, call_id: str, prompt: PromptTokens, completion: TokenIds | None) -> int:
        """Register a call's delta-encoded prompt and its completion; the full prompt's length.

        Raises SerializationError (not retriable) when the base was not added before or is too
        short, or the call was added already: the record cannot be resolved by waiting.
        """
        if call_id in self._links:
            raise SerializationError(f"call {call_id!r} added twice")
        prompt_len = len(prompt.suffix)
        if prompt.base_call_id is not None:
            base = self._links.get(prompt.base_call_id)
            if base is None:
                raise SerializationError(f"prompt base call {prompt.base_call_id!r} is unknown")
            if base.context_len < prompt.shared_len:
                raise SerializationError(
                    f"prompt shares {prompt.shared_len} tokens of base call "
                    f"{prompt.base_call_id!r}, which has only {base.context_len}"
                )
            prompt_len += prompt.shared_len
        self._links[call_id] = _Link(
            prompt.base_call_id,
            prompt.shared_len,
            prompt.suffix.data,
            completion.data if completion is not None else b"",
            prompt_len,
        )
        return prompt_len

    def prompt_len(self, call_id: str) -> int:
        """The full prompt's length in tokens (nothing is built)."""
        return self._links[call_id].prompt_len

    def prompt(self, call_id: str) -> TokenIds:
        """The call's full prompt token ids; KeyError for a call never added."""
        data = self._prompts.get(call_id)
        if data is None:
            link = self._links[call_id]
            data = self._build(call_id, link)[: link.prompt_len * _ID]
            _remember(self._prompts, call_id, data, self._cache_size)
        else:
            self._prompts.move_to_end(call_id)
        return TokenIds(data)

    def context(self, call_id: str) -> TokenIds:
        """The call's prompt followed by its completion (what later prompts build on)."""
        return TokenIds(self._build(call_id, self._links[call_id]))

    def _build(self, call_id: str, link: _Link) -> bytes:
        cached = self._contexts.get(call_id)
        if cached is not None:
            self._contexts.move_to_end(call_id)
            return cached
        base = None if link.base is None else self._contexts.get(link.base)
        if link.base is None or base is not None:
            # The common case: one step from a base built just before.
            head = memoryview(base)[: link.shared * _ID] if base is not None else b""
            data = b"".join((head, link.suffix, link.completion))
        else:
            data = self._replay(link)
        _remember(self._contexts, call_id, data, self._cache_size)
        return data

    def _replay(self, link: _Link) -> bytes:
        # Back to a cached ancestor or the root, then forward in one buffer: cutting a
        # bytearray's tail and appending is O(appended), so the walk costs O(chain + tokens).
        chain = [link]
        start = b""
        while chain[-1].base is not None:
            base_id = chain[-1].base
            cached = self._contexts.get(base_id)
            if cached is not None:
                start = cached
                break
            chain.append(self._links[base_id])
        buffer = bytearray(start)
        for step in reversed(chain):
            del buffer[step.shared * _ID :]
            buffer += step.suffix
            buffer += step.completion
        return bytes(buffer)


def _remember(cache: OrderedDict[str, bytes], key: str, data: bytes, size: int) -> None:
    cache[key] = data
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
