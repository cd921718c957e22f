"""The served context length read from a ``/v1/models`` answer."""

from __future__ import annotations

from typing import Any

import pytest

from rollstream.interceptor.served import model_context

VLLM = {"object": "list", "data": [{"id": "qwen", "object": "model", "max_model_len": 8192}]}
TWO = {"data": [{"id": "a", "max_model_len": 1024}, {"id": "b", "max_model_len": 2048}]}


@pytest.mark.parametrize(
    ("listed", "model", "expected"),
    [
        (VLLM, "qwen", 8192),
        (VLLM, None, 8192),  # the only model, whatever the harness named
        (VLLM, "other", 8192),
        (TWO, "b", 2048),
        (TWO, None, None),  # two models, none named: no guess
        ({"data": [{"id": "x"}]}, None, None),  # a server that does not say
        ({"data": [{"id": "x", "max_model_len": "8192"}]}, None, None),
        ({"data": [{"id": "x", "max_model_len": True}]}, None, None),
        ({"error": "no"}, None, None),
        ([], None, None),
    ],
)
def test_the_context_length_of_the_served_model(
    listed: Any, model: str | None, expected: int | None
) -> None:
    assert model_context(listed, model) == expected
