"""What every vocabulary source is made of, and the helpers the sources share.

A source pairs the package's own encoder (the reference) with the converted tokenizer; the
helpers look packages up and run the tiktoken converter.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tokenizers import Tokenizer, processors

from rollstream.errors import ConfigurationError

INSTALL_HINT = "pip install 'rollstream[vocabularies]'"
Table = list[tuple[int, str]]  # (id, special token), in id order
Encode = Callable[[str], list[int]]


@dataclass(frozen=True)
class Reference:
    """A package's own encoder, seen through Hugging Face's ``encode(text)`` minus the BOS.

    ``bos`` is the id HF's default ``encode`` prepends, if any. ``advisory`` is a second encoder
    whose agreement is recorded but does not decide (see DeepSeek).
    """

    describe: str
    encode: Encode
    decode: Callable[[list[int]], str]
    specials: dict[str, int]
    n_vocab: int
    bos: int | None = None
    nfc: bool = False
    plain_added: frozenset[str] = frozenset()  # added tokens the package marks non-special
    advisory: tuple[str, Encode] | None = None


@dataclass(frozen=True)
class Converted:
    """A converted ``tokenizers.Tokenizer`` and the special-token roles of its config."""

    tokenizer: Tokenizer
    eos_token: str
    bos_token: str | None = None
    pad_token: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    model_max_length: int | None = None  # when the package says, over the source's default


@dataclass(frozen=True)
class Source:
    """One vocabulary: the packages it is read from, its converter and its reference encoder.

    ``convert`` gets the cache directory (gpt-oss converts the o200k file it keeps there).
    """

    packages: tuple[str, ...]
    convert: Callable[[Path], Converted]
    reference: Callable[[], Reference]
    model_max_length: int
    standin_for: str | None = None

    def version(self) -> str:
        """The installed versions of the source packages: the cache key of the built folder."""
        return "+".join(package_version(package) for package in self.packages)


def package_version(package: str) -> str:
    """The installed version of ``package``, or ConfigurationError naming what to install."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigurationError(f"package {package!r} is not installed: {INSTALL_HINT}") from None


def _import(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(f"package {package!r} is missing ({exc}): {INSTALL_HINT}") from exc


def _package_dir(module: str, package: str) -> Path:
    return Path(_import(module, package).__file__ or "").parent


def _tiktoken_tokenizer(vocab_file: Path, pattern: str, specials: Iterable[str]) -> Tokenizer:
    """The field's own tiktoken converter; it appends ``specials`` as special added tokens."""
    module = _import("transformers.convert_slow_tokenizer", "transformers")  # untyped
    converter = module.TikTokenConverter(
        str(vocab_file), pattern, extra_special_tokens=list(specials)
    )
    tokenizer: Tokenizer = converter.converted()
    return tokenizer


def _with_bos(tokenizer: Tokenizer, bos: str, bos_id: int) -> Tokenizer:
    """Prepend ``bos`` on ``encode(text)``, as these families' published tokenizer.json files do."""
    template = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
    )
    tokenizer.post_processor = processors.Sequence([tokenizer.post_processor, template])
    return tokenizer


def _split_encode(specials: dict[str, int], plain: Encode) -> Encode:
    """HF's added-token split (leftmost, longest) around an encoder of plain text."""
    names = sorted(specials, key=len, reverse=True)
    pattern = re.compile("(" + "|".join(map(re.escape, names)) + ")")

    def encode(text: str) -> list[int]:
        ids: list[int] = []
        for part in pattern.split(text):
            ids.extend([specials[part]] if part in specials else plain(part) if part else [])
        return ids

    return encode
