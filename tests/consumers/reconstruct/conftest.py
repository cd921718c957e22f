"""The shipped tokenizer, loaded once for the reconstruction tests that need one."""

from __future__ import annotations

import pytest

from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.models.tokenizer import ChatTokenizer


@pytest.fixture(scope="session")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer(default_tokenizer_dir())
