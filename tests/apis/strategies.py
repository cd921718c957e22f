"""Hypothesis strategies the translators' property tests share: tool names, JSON, stream cuts."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

#: Function names as the APIs allow them.
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_\-]{0,30}", fullmatch=True)


def json_values_of(texts: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """JSON values (finite floats) whose strings and keys are drawn from ``texts``."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
        max_leaves=8,
    )


def split(data: st.DataObject, value: str) -> list[str]:
    """``value`` cut at random places (every piece non-empty)."""
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(value) - 1, 1)), max_size=5)))
    bounds = [0, *(c for c in cuts if c < len(value)), len(value)]
    return [value[a:b] for a, b in itertools.pairwise(bounds) if b > a]
