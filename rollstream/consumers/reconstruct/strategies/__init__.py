"""Reconstruction strategies: pure functions from a session's ordered calls to segments.

Each strategy is a :data:`Strategy`, ``(calls, context) -> StrategyResult``. The built-in ones
are in :data:`STRATEGIES`; :func:`get_strategy` also accepts an import path
``package.module:function``, which is how users add their own.
"""

from __future__ import annotations

import importlib

from rollstream.consumers.reconstruct.strategies.base import (
    BRANCH,
    DRIFT,
    EDITED_HISTORY,
    RETRY,
    TRUNCATED,
    UNSPLICEABLE,
    SegmentBuilder,
    Strategy,
    StrategyContext,
    StrategyResult,
    Tally,
    classify_break,
    usable_calls,
)
from rollstream.consumers.reconstruct.strategies.per_call import per_call
from rollstream.consumers.reconstruct.strategies.prefix_merge import prefix_merge
from rollstream.consumers.reconstruct.strategies.prompt_prefix_merge import prompt_prefix_merge
from rollstream.consumers.reconstruct.strategies.retokenize import retokenize
from rollstream.consumers.reconstruct.strategies.tree import tree
from rollstream.errors import ConfigurationError

STRATEGIES: dict[str, Strategy] = {
    "per_call": per_call,
    "prefix_merge": prefix_merge,
    "prompt_prefix_merge": prompt_prefix_merge,
    "tree": tree,
    "retokenize": retokenize,
}
"""The built-in strategies by name."""

NEEDS_TOKENIZER = frozenset({"retokenize"})
"""Built-in strategies that raise ConfigurationError when the context has no tokenizer."""


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``, or the callable at import path ``module:attr``.

    Raises ConfigurationError for an unknown name, a module that does not import, a missing
    attribute or one that is not callable.
    """
    strategy = STRATEGIES.get(name)
    if strategy is not None:
        return strategy
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"unknown strategy {name!r}: choose one of {', '.join(sorted(STRATEGIES))} "
            "or give an import path package.module:function"
        )
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"strategy {name!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(
                f"strategy {name!r}: {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise ConfigurationError(f"strategy {name!r} is not callable ({type(obj).__name__})")
    # Callable is all that can be checked here; the signature is the user's promise.
    return obj


__all__ = [
    "BRANCH",
    "DRIFT",
    "EDITED_HISTORY",
    "NEEDS_TOKENIZER",
    "RETRY",
    "STRATEGIES",
    "TRUNCATED",
    "UNSPLICEABLE",
    "SegmentBuilder",
    "Strategy",
    "StrategyContext",
    "StrategyResult",
    "Tally",
    "classify_break",
    "get_strategy",
    "per_call",
    "prefix_merge",
    "prompt_prefix_merge",
    "retokenize",
    "tree",
    "usable_calls",
]
