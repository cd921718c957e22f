"""Hypothesis strategies shared by the fuzzing tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: Characters of a URL path (and a session id in one), unescaped and escaped.
PATH_CHARS = st.characters(
    codec="ascii", categories=("L", "N"), include_characters="-._~%/!$&'()*+,;=:@"
)


def json_values(max_leaves: int = 10) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars, and lists and objects of them, nested."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=20)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
        ),
        max_leaves=max_leaves,
    )


def header_values(max_size: int) -> st.SearchStrategy[str]:
    """Any value an HTTP client sends in a header: latin-1 without control characters (DEL
    included: aiohttp's client refuses to send one)."""
    chars = st.characters(codec="latin-1", min_codepoint=0x20, exclude_characters="\x7f")
    return st.text(chars, max_size=max_size)
