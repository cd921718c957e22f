"""Model-family fixtures: the reference backend's toy tokenizer (loaded once)."""

from __future__ import annotations

import pytest

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.tokenizer import ChatTokenizer


@pytest.fixture(scope="session")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())


# A tokenizer folder with another (Llama-like) template, shared with the backend's tests.
from tests.dev.backend.conftest import other_tokenizer  # noqa: E402, F401
