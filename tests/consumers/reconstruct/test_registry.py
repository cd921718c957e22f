"""The strategy registry and strategies given by import path."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rollstream.consumers.reconstruct.calls import ResolvedCall
from rollstream.consumers.reconstruct.strategies import (
    NEEDS_TOKENIZER,
    STRATEGIES,
    StrategyContext,
    StrategyResult,
    get_strategy,
    per_call,
)
from rollstream.errors import ConfigurationError
from tests.consumers.reconstruct.sessions import build_session

NOT_CALLABLE = 42


def only_first(calls: Sequence[ResolvedCall], context: StrategyContext) -> StrategyResult:
    """A user's strategy: per_call on the first call only."""
    return per_call(calls[:1], context)


class Namespace:
    """Holds a strategy one attribute deeper."""

    strategy = staticmethod(only_first)


def test_builtin_names() -> None:
    assert set(STRATEGIES) == {
        "per_call",
        "prefix_merge",
        "prompt_prefix_merge",
        "tree",
        "retokenize",
    }
    for name, strategy in STRATEGIES.items():
        assert get_strategy(name) is strategy
        assert strategy.__doc__
    assert set(STRATEGIES) >= NEEDS_TOKENIZER


@pytest.mark.parametrize(
    "path",
    [
        "tests.consumers.reconstruct.test_registry:only_first",
        "tests.consumers.reconstruct.test_registry:Namespace.strategy",
    ],
)
def test_import_path(path: str) -> None:
    strategy = get_strategy(path)
    assert strategy is only_first
    result = strategy(build_session(["turn"]).resolved(), StrategyContext())
    assert len(result.segments) == 1


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("prefix-merge", "unknown strategy 'prefix-merge': choose one of per_call"),
        ("no.such.module:fn", "cannot import 'no.such.module'"),
        ("tests.consumers.reconstruct.test_registry:missing", "has no attribute 'missing'"),
        ("tests.consumers.reconstruct.test_registry:NOT_CALLABLE", "is not callable (int)"),
        (":fn", "unknown strategy"),
        ("module:", "unknown strategy"),
    ],
)
def test_bad_names_are_configuration_errors(name: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_strategy(name)
