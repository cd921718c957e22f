"""The reference backend's own tokenizer folder (its toy vocabulary and Qwen-like template)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def default_tokenizer_dir() -> Path:
    """The tokenizer folder shipped with rollstream (built by ``build_tokenizer``)."""
    return Path(str(resources.files("rollstream.dev.backend").joinpath("data", "tokenizer")))
