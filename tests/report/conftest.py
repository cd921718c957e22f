"""Report fixtures: the shipped tokenizer, loaded once."""

from __future__ import annotations

import pytest

from rollstream.backend.tokenizer import ChatTokenizer, default_tokenizer_dir


@pytest.fixture(scope="session")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())
