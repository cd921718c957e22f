"""Llama 3 and gpt-oss, both tiktoken-format vocabularies.

Llama 3 from llama-models' tokenizer.model, gpt-oss's o200k_harmony from quicktok's data, and
the o200k_base file openai-harmony reads.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rollstream.errors import ConfigurationError
from rollstream.models.vocab_base import (
    Converted,
    Reference,
    Table,
    _import,
    _package_dir,
    _split_encode,
    _tiktoken_tokenizer,
    _with_bos,
)

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
