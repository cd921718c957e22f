"""Hot-path JSON: orjson where it can, the standard library for what orjson refuses."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollstream import jsonfast

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_same_as_the_standard_library(value: Any) -> None:
    encoded = jsonfast.dumps(value)
    assert json.loads(encoded) == json.loads(json.dumps(value))
    assert jsonfast.loads(encoded) == json.loads(encoded)


def test_what_orjson_refuses_falls_back() -> None:
    assert math.isnan(jsonfast.loads(b'{"x": NaN}')["x"])
    assert json.loads(jsonfast.dumps({"seed": 2**70})) == {"seed": 2**70}
    assert jsonfast.dumps({"é": 1}) == '{"é":1}'.encode()  # UTF-8, not \\u escapes


@pytest.mark.parametrize("bad", [b"{bad", b"\xff\xfe", "", b'{"a": 1'])
def test_invalid_json_is_a_value_error(bad: bytes | str) -> None:
    with pytest.raises(ValueError):
        jsonfast.loads(bad)
